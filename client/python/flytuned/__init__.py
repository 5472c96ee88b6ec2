"""flytuned -- Python side of flytuned beyond the ctypes client.

flytuned.torch: the PyTorch integration (custom ops flytuned::*, enable(),
disable(), prepare()).  Importing flytuned alone imports nothing heavy;
the ctypes client is the `flyclient` package next to this one.
"""
