"""The shared core every domain stands on: the call context, errors, limits and thresholds, result models, path
confinement, child processes, the files a call reads and how ranks are named in them, stack frames, safe unpickling,
interval arithmetic, worker pools, redaction, the Xid table. No domain is imported from here; import the modules
themselves (tools.core.models, tools.core.files, ...).
"""
