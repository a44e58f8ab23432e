"""Tensor- and pipeline-parallel instances: a group of rank processes joined by torch.distributed.

Rank 0 runs the engine's scheduler and broadcasts each step's plan; every rank (0 included) computes its
heads of its layers over its own paged KV pool. Facts from Megatron-LM, vLLM and nano-vllm: QKV and gate/up
split by columns, out and down by rows with one all-reduce each; KV heads replicated where a GQA model has
fewer KV heads than ranks.
"""
