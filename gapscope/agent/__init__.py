"""The agent interface: `gapscope mcp`, a Model Context Protocol server over the commands."""
