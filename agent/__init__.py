"""The node agent: talks to the control plane only through the REST API."""
