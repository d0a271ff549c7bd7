import sys

from mcp_server.server import main

sys.exit(main())
