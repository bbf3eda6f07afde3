#!/usr/bin/env python3
"""Writes N signed Trello-shaped webhook bodies (distinct action ids, ~4.5 KB each) for wrk, one per line:
path<TAB>signature<TAB>body. Signatures use Python's hmac, independently of the server's Swift code. ACCOUNT may be
several ids separated by commas: body i goes to account i mod their number (all share the secret)."""
import base64, hashlib, hmac, json, sys

n, secret, public_url, accounts, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(","), sys.argv[5]
with open(out, "w") as f:
    for i in range(n):
        path = f"/dailyroundup/webhook/trello/{accounts[i % len(accounts)]}"
        body = {
            "model": {"id": "L1", "name": "Groceries", "closed": False, "idBoard": "B1", "pos": 65535},
            "action": {
                "id": f"bench-{i:08d}-{'%024x' % (i * 2654435761 % (1 << 96))}",
                "idMemberCreator": "5a5b5c5d5e5f606162636465",
                "type": "updateCard",
                "date": "2026-11-22T10:00:00.000Z",
                "data": {
                    "card": {"id": f"card-{i % 1000}", "name": f"Renamed {i}", "idShort": 7, "shortLink": "aBcD1234"},
                    "old": {"name": "Card"},
                    "list": {"id": "L1", "name": "Groceries"},
                    "board": {"id": "B1", "name": "Home", "shortLink": "SCPjg8ON"},
                },
                "memberCreator": {"id": "5a5b5c5d5e5f606162636465", "fullName": "Ada Lovelace", "username": "ada",
                                  "avatarHash": "f" * 32, "initials": "AL"},
                "display": {"translationKey": "action_renamed_card", "entities": "x" * 3700},
            },
        }
        raw = json.dumps(body, separators=(",", ":")).encode()
        sig = base64.b64encode(hmac.new(secret.encode(), raw + (public_url + path).encode(), hashlib.sha1).digest()).decode()
        f.write(f"{path}\t{sig}\t{raw.decode()}\n")
