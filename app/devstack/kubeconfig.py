"""The kubeconfig ``make up`` writes, so ``kubectl`` reaches the dev stack as the admin.

One cluster (the API's HTTPS URL and the CA, inlined so the file stands alone), one user (the
bootstrap token), one context joining them in the ``default`` namespace. ``kubectl
--kubeconfig .qm/kubeconfig get pods`` then works without flags (ADR 0050).
"""

from __future__ import annotations

import base64
from typing import Any

NAME = "quaymaster"


def kubeconfig(
    server: str, ca_pem: bytes, token: str, namespace: str = "default"
) -> dict[str, Any]:
    """A ``kind: Config`` for ``server``, trusting ``ca_pem``, authenticated with ``token``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": NAME,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": NAME,
                "context": {"cluster": NAME, "user": "admin", "namespace": namespace},
            }
        ],
        "current-context": NAME,
        "preferences": {},
    }
