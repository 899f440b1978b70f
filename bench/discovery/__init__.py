"""Discovery benchmark: fan-out latency, bytes, throughput and reconnect storms of one
discovery replica, and the node proxy's data path (``python -m bench.discovery.run``)."""
