"""OAK's real runtime: resumable data-parallel training workers, crash-safe checkpoints, a process launcher.

- ``oak.runtime.checkpoint``: atomic, checksummed checkpoint store in a job directory;
- ``oak.runtime.worker``: ``python -m oak.runtime.worker``, one process per rank (contract in its docstring);
- ``oak.runtime.launch``: ``start_worker`` starts the W rank processes of a job and returns a handle;
- ``oak.runtime.models`` / ``oak.runtime.data``: the tiny test network, ResNet-18 for CIFAR-10, and their data.

This ``__init__`` imports nothing: ``launch`` needs only the standard library, the other modules import torch.
"""
