"""MCP server and CLI of gpu-triage-mcp: registration, the one tool contract, rendering."""

__version__ = "0.1.0"  # as pyproject.toml's; both commands print it with --version
