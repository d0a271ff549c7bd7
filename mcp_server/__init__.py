"""MCP server and CLI of gpu-triage-mcp: registration, the one tool contract, rendering."""
