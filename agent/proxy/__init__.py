"""The node proxy (ADR 0040): one per machine beside the agent, ``python -m agent.proxy``.

It subscribes to the discovery service (:mod:`agent.proxy.subscriber`), keeps a routing table
(:mod:`agent.proxy.table`, pure), forwards TCP from each service address to an endpoint
(:mod:`agent.proxy.forward`), answers DNS for service names (:mod:`agent.proxy.dns`), and in
edge mode load-balances LoadBalancer services with health checks of its own
(:mod:`agent.proxy.edge`). :mod:`agent.proxy.run` wires them into one process.
"""
