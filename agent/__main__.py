"""``python -m agent``: the node agent for this machine (see ``agent.loop``)."""

from agent.loop import main

raise SystemExit(main())
