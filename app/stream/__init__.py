"""The revision stream: logical decoding -> revision log -> watch caches."""
