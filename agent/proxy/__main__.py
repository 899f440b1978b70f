"""``python -m agent.proxy``: the node proxy for this machine (see ``agent.proxy.run``)."""

from agent.proxy.run import main

raise SystemExit(main())
