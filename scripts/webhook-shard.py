#!/usr/bin/env python3
"""Prints the hash tag of an account's webhook shard, `{whNN}`, as RedisKeys and WebhookShard compute it (FNV-1a, 64
bits, of the account id, modulo 64), for the benchmark scripts that write an account's keys themselves."""
import sys

h = 0xCBF29CE484222325
for byte in sys.argv[1].encode():
    h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
print("{wh%02d}" % (h % 64))
