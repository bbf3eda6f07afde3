#!/usr/bin/env python3
"""The fixed workloads of scripts/bench-cost, sent one request at a time over one keep-alive connection, so that
the server under callgrind does the same work in every run. Every answer is checked; any surprise exits non-zero.

  bench-cost-client.py webhooks PORT BODIES_TSV FIRST COUNT   the bodies FIRST..FIRST+COUNT-1 of scripts/bench-bodies.py,
                                                             each must be answered 200 {"status":"accepted"}
  bench-cost-client.py changes PORT TOKEN COUNT CHANGES       COUNT pages of GET /dailyroundup/changes?limit=200 at
                                                             fixed pseudo-random after_ids below CHANGES-200; each page
                                                             must hold 200 changes
"""
import http.client, json, sys


def fail(message):
    sys.stderr.write(f"bench-cost-client: {message}\n")
    sys.exit(1)


def webhooks(port, bodies, first, count):
    with open(bodies) as f:
        lines = f.readlines()[first:first + count]
    if len(lines) != count:
        fail(f"{bodies} holds fewer than {first + count} bodies")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for line in lines:
        path, signature, body = line.rstrip("\n").split("\t", 2)
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "X-Trello-Webhook": signature})
        response = conn.getresponse()
        answer = response.read()
        if response.status != 200 or json.loads(answer).get("status") != "accepted":
            fail(f"webhook answered {response.status} {answer[:200]!r}")


def changes(port, token, count, total):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    seed = 12345
    for _ in range(count):
        seed = (seed * 1103515245 + 12345) % (1 << 31)
        after = seed % (total - 200)
        conn.request("GET", f"/dailyroundup/changes?limit=200&after_id={after}", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        answer = response.read()
        if response.status != 200:
            fail(f"changes answered {response.status} {answer[:200]!r}")
        page = json.loads(answer)
        if len(page.get("changes", [])) != 200:
            fail(f"a page after {after} held {len(page.get('changes', []))} changes, not 200")


mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "webhooks" and len(sys.argv) == 6:
    webhooks(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
elif mode == "changes" and len(sys.argv) == 6:
    changes(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
else:
    fail(__doc__)
