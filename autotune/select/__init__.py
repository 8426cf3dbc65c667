"""The runtime selector: which config for a problem on a GPU, measured, estimated or the default."""
