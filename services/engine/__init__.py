"""The model execution engine shared by prefill and decode instances."""
