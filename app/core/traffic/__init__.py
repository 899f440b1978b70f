"""Service traffic as pure data: the discovery wire protocol, the resources it carries and the
state a discovery replica keeps (ADR 0038). The discovery service (``app.discovery``), the node
proxy (``agent.proxy``) and the discovery benchmark share it; none of it does I/O."""
