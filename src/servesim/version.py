"""servesim's version (also `servesim.__version__`): a module of its own, so the modules that
print it need not import the package's lazy public API."""

__version__ = "0.1.0"
