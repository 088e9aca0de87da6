"""Container health check: GET a URL, exit 0 on a 2xx answer, 1 otherwise.

Installed as ``tepat-healthcheck`` by the Dockerfile. The image's HEALTHCHECK runs it
without an argument (``tepat serve``/``tepat api`` on port 8000); docker-compose.yml
passes the URL of each other process (``/readyz``, the sandbox, ``/metrics``).
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/healthz"


def main(argv: list[str]) -> int:
    url = argv[1] if len(argv) > 1 else DEFAULT_URL
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            status = int(response.status)
    except (urllib.error.URLError, OSError) as e:
        print(f"tepat-healthcheck: {url}: {e}", file=sys.stderr)
        return 1
    return 0 if 200 <= status < 300 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
