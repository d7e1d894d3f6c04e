"""The loops that do I/O: detection, the watcher and the reconcilers; each observes, asks a pure machine, acts."""
