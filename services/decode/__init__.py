"""Decode instances: reserve blocks, pull the prompt's K/V through kvxfer, continuous batching."""
