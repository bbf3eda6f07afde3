import Foundation
import RoundupCore
import RoundupOps
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// `roundupctl pending`, `dlq list` pages and filters, `dlq delete`, `pause`/`resume` and `consumers prune`, number by
/// number against what was written to a real redis-server.
extension RoundupCtlTests {
    func json(_ result: (code: Int32?, output: String)) throws -> JSONValue {
        #expect(result.code == 0, "\(result.output)")
        return try JSONParser.parse(Array(result.output.utf8))
    }

    @Test func pendingShowsEachEntryWithItsConsumerDeliveriesAndLastError() async throws {
        let stack = try await Stack(store: .sqlite)
        let stream = RedisArgument(stack.keys.webhookStream(WebhookShard(index: 0)))
        _ = try await stack.redis.send("XGROUP", "CREATE", stream, "workers", "0", "MKSTREAM")
        var local: [String] = []
        for i in 0..<5 {
            local.append(
                try #require(try await stack.redis.send("XADD", stream, "*", "account", RedisArgument("acct-\(i)"), "type", "updateCard").string))
        }
        // The tools name an entry of the sharded webhook stream `<shard>:<id>`.
        let ids = local.map { "0:" + $0 }
        // Three delivered to c1; the first claimed again by c2 (a second delivery) with a recorded failure.
        _ = try await stack.redis.send("XREADGROUP", "GROUP", "workers", "c1", "COUNT", 3, "STREAMS", stream, ">")
        _ = try await stack.redis.send("XCLAIM", stream, "workers", "c2", 0, RedisArgument(local[0]))
        _ = try await stack.redis.send(
            "HSET", RedisArgument(stack.keys.webhookErrors(WebhookShard(index: 0))), RedisArgument(local[0]), "trello_transient\tcard fetch: 502")

        let all = try json(try await run(stack, ["pending", "webhooks", "--json"]))
        let entries = try #require(all["pending"]?.arrayValue)
        #expect(entries.map { $0["id"]?.stringValue } == ids[0..<3].map { $0 })
        #expect(entries.map { $0["consumer"]?.stringValue } == ["c2", "c1", "c1"])
        #expect(entries.map { $0["deliveries"] } == [.number(2), .number(1), .number(1)])
        #expect(entries[0]["last_error"] == "trello_transient: card fetch: 502")
        #expect(entries[1]["last_error"] == .null)
        #expect(entries.map { $0["account"]?.stringValue } == ["acct-0", "acct-1", "acct-2"])
        #expect(entries.allSatisfy { $0["type"] == "updateCard" })
        #expect(all["next"] == .null)

        // Pages of two: the first says where to go on, the second ends.
        let first = try json(try await run(stack, ["pending", "--limit", "2", "--json"]))
        #expect(first["pending"]?.arrayValue?.count == 2)
        let next = try #require(first["next"]?.stringValue)
        #expect(next == ids[1])
        let second = try json(try await run(stack, ["pending", "--limit", "2", "--after", next, "--json"]))
        #expect(second["pending"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[2]])
        #expect(second["next"] == .null)
        // Failing ones only.
        let failing = try json(try await run(stack, ["pending", "--min-deliveries", "2", "--json"]))
        #expect(failing["pending"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[0]])
        // The table for people, and a usage error for a stream that does not exist.
        let table = try await run(stack, ["pending"])
        #expect(table.code == 0 && table.output.contains("deliveries 2  trello_transient: card fetch: 502"), "\(table.output)")
        #expect(try await run(stack, ["pending", "nonsense"]).code == 2)
        await stack.shutdown()
    }

    @Test func deadLettersArePagedFilteredAndDeletedOneByOne() async throws {
        let stack = try await Stack(store: .sqlite)
        let dead = RedisArgument(stack.keys.deadLetterStream(WebhookShard(index: 0)))
        var local: [String] = []
        let rows: [(account: String, type: String, error: String)] = [
            ("a1", "createCard", "trello_transient: 500"), ("a2", "updateCard", "Store: TIMEOUT"), ("a1", "updateCard", "trello_transient: 502"),
            ("a2", "createCard", "undecodable: bad body"), ("a1", "deleteCard", "store timeout"),
        ]
        for row in rows {
            local.append(
                try #require(
                    try await stack.redis.send(
                        "XADD", dead, "*", "account", RedisArgument(row.account), "type", RedisArgument(row.type), "action", "x", "error",
                        RedisArgument(row.error), "deliveries", "5"
                    ).string))
        }
        let ids = local.map { "0:" + $0 }
        let first = try json(try await run(stack, ["dlq", "list", "--limit", "2", "--json"]))
        #expect(first["dead_letters"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[0], ids[1]])
        #expect(first["next"]?.stringValue == ids[1])
        let rest = try json(try await run(stack, ["dlq", "list", "--limit", "10", "--after", ids[1], "--json"]))
        #expect(rest["dead_letters"]?.arrayValue?.map { $0["id"]?.stringValue } == Array(ids[2...]).map { $0 })
        #expect(rest["next"] == .null)

        let a1 = try json(try await run(stack, ["dlq", "list", "--account", "a1", "--json"]))
        #expect(a1["dead_letters"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[0], ids[2], ids[4]])
        let a1Updates = try json(try await run(stack, ["dlq", "list", "--account", "a1", "--type", "updateCard", "--json"]))
        #expect(a1Updates["dead_letters"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[2]])
        // The error filter ignores case; a filtered page of one goes on after its match.
        let timeouts = try json(try await run(stack, ["dlq", "list", "--error", "timeout", "--limit", "1", "--json"]))
        #expect(timeouts["dead_letters"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[1]])
        let moreTimeouts = try json(
            try await run(stack, ["dlq", "list", "--error", "timeout", "--after", try #require(timeouts["next"]?.stringValue), "--json"]))
        #expect(moreTimeouts["dead_letters"]?.arrayValue?.map { $0["id"]?.stringValue } == [ids[4]])

        // One deleted (and an id that is not there), the others kept.
        let deleted = try json(try await run(stack, ["dlq", "delete", ids[3], "0:0-1", "--json"]))
        #expect(deleted["deleted"] == .number(1))
        #expect(try await stack.redis.send("XLEN", dead).int == 4)
        let left = try await stack.redis.send("XRANGE", dead, "-", "+").streamEntries.map(\.id)
        #expect(left == [local[0], local[1], local[2], local[4]])
        #expect(try await run(stack, ["dlq", "delete"]).code == 2)
        await stack.shutdown()
    }

    /// Entries of the job and push streams that are no message of their stream: the worker and the pusher, real
    /// `dlq replay` by filter: a dry run counts what would go back (by type and error class) and changes nothing; the
    /// replay then puts back exactly those, into their shard's stream, and leaves the others; a time window reads
    /// `failed_at`; ids and filters together, or a time it cannot read, are refused with a message.
    @Test func deadLettersAreReplayedByFilterAfterADryRun() async throws {
        let stack = try await Stack(store: .sqlite)
        let shard = WebhookShard(index: 0)
        let dead = RedisArgument(stack.keys.deadLetterStream(shard))
        let now = Int(Date().timeIntervalSince1970 * 1000)
        let rows: [(account: String, type: String, error: String, failedAt: Int)] = [
            ("a1", "createCard", "trello_transient\tGET answered 500", now - 3 * 3_600_000), ("a2", "updateCard", "store\ttimeout", now - 60_000),
            ("a1", "updateCard", "trello_transient\tGET answered 502", now - 60_000), ("a1", "deleteCard", "store\ttimeout", now - 30_000),
        ]
        var local: [String] = []
        for row in rows {
            local.append(
                try #require(
                    try await stack.redis.send(
                        "XADD", dead, "*", "account", RedisArgument(row.account), "type", RedisArgument(row.type), "action", "x", "body", "{}",
                        "error", RedisArgument(row.error), "deliveries", "5", "failed_at", RedisArgument(String(row.failedAt))
                    ).string))
        }
        let ids = local.map { "0:" + $0 }
        let dry = try json(try await run(stack, ["dlq", "replay", "--account", "a1", "--error", "TRELLO_transient", "--dry-run", "--json"]))
        #expect(dry["dry_run"] == .bool(true) && dry["matched"] == .number(2) && dry["replayed"] == .number(0))
        #expect(dry["ids"]?.arrayValue?.compactMap(\.stringValue) == [ids[0], ids[2]])
        #expect(dry["by_type"]?["createCard"] == .number(1) && dry["by_type"]?["updateCard"] == .number(1))
        #expect(dry["by_error"]?["trello_transient"] == .number(2))
        #expect(try await stack.redis.send("XLEN", dead).int == 4, "a dry run changes nothing")
        let text = try await run(stack, ["dlq", "replay", "--account", "a1", "--dry-run"])
        #expect(
            text.code == 0 && text.output.contains("would replay 3 dead letter(s)") && text.output.contains("by error: trello_transient 2, store 1"),
            "\(text.output)")

        // Within the last hour only: the three-hour-old one stays.
        let recent = try json(try await run(stack, ["dlq", "replay", "--account", "a1", "--since", "1h", "--json"]))
        #expect(recent["replayed"] == .number(2) && recent["ids"]?.arrayValue?.compactMap(\.stringValue) == [ids[2], ids[3]])
        let left = try await stack.redis.send("XRANGE", dead, "-", "+").streamEntries.map(\.id)
        #expect(left == [local[0], local[1]])
        let back = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.webhookStream(shard)), "-", "+").streamEntries
        #expect(back.map { String(decoding: $0.fields["type"] ?? [], as: UTF8.self) } == ["updateCard", "deleteCard"])
        // Before a time: the old one.
        let old = try json(try await run(stack, ["dlq", "replay", "--until", Timestamp.string(Date(timeIntervalSinceNow: -3_600)), "--json"]))
        #expect(old["replayed"] == .number(1) && old["ids"]?.arrayValue?.compactMap(\.stringValue) == [ids[0]])

        let both = try await run(stack, ["dlq", "replay", ids[1], "--account", "a2", "--json"])
        #expect(both.code != 0 && both.output.contains("ids or filters, not both"), "\(both.output)")
        let unreadable = try await run(stack, ["dlq", "replay", "--since", "yesterday", "--json"])
        #expect(unreadable.code != 0 && unreadable.output.contains("--since yesterday"), "\(unreadable.output)")
        #expect(try await stack.redis.send("XLEN", dead).int == 1)
        await stack.shutdown()
    }

    /// processes, dead-letter them at once (both used to acknowledge them silently), `queues` counts them, `dlq list
    /// --stream` shows why, `dlq replay --stream` puts one back on its stream (where it is dead-lettered again) and
    /// `dlq purge --stream` empties them.
    @Test func jobAndPushEntriesThatDoNotDecodeAreDeadLetteredAndShown() async throws {
        let stack = try await Stack(store: .sqlite)
        let apns = try await FakeAPNs.start()
        defer { Task { await apns.stop() } }
        _ = try await stack.startWorker(name: "w1")
        try await stack.startPusher(apns: apns)
        func groupsReady() async throws -> Bool {
            let jobs = try await stack.redis.send("XINFO", "GROUPS", RedisArgument(stack.keys.jobStream))
            let push = try await stack.redis.send("XINFO", "GROUPS", RedisArgument(stack.keys.pushStream))
            return jobs.array?.isEmpty == false && push.array?.isEmpty == false
        }
        #expect(await TestSupport.eventually { (try? await groupsReady()) == true })
        // A job without its id, a push without its account.
        let badJob = try #require(
            try await stack.redis.send("XADD", RedisArgument(stack.keys.jobStream), "*", "account", "acct-1", "kind", "sync").string)
        let badPush = try #require(
            try await stack.redis.send("XADD", RedisArgument(stack.keys.pushStream), "*", "kind", "background", "reason", "changes").string)
        let deadJobs = RedisArgument(stack.keys.jobDeadLetters)
        let deadPushes = RedisArgument(stack.keys.pushDeadLetters)
        #expect(try await TestSupport.eventually { try await stack.redis.send("XLEN", deadJobs).int == 1 })
        #expect(try await TestSupport.eventually { try await stack.redis.send("XLEN", deadPushes).int == 1 })
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.jobStream)).int == 0)
        #expect(try await stack.redis.send("XLEN", RedisArgument(stack.keys.pushStream)).int == 0)

        let jobs = try #require(try json(try await run(stack, ["dlq", "list", "--stream", "jobs", "--json"]))["dead_letters"]?.arrayValue)
        #expect(jobs.count == 1)
        #expect(jobs.first?["original_id"]?.stringValue == badJob && jobs.first?["account"] == "acct-1")
        #expect(jobs.first?["deliveries"] == "1")
        #expect(jobs.first?["error"]?.stringValue?.hasPrefix("undecodable: entry is not a SyncJobMessage") == true, "\(jobs)")
        let pushes = try #require(try json(try await run(stack, ["dlq", "list", "--stream", "push", "--json"]))["dead_letters"]?.arrayValue)
        #expect(pushes.first?["original_id"]?.stringValue == badPush && pushes.first?["account"] == .null)
        #expect(pushes.first?["error"]?.stringValue?.hasPrefix("undecodable: entry is not a PushRequest") == true, "\(pushes)")
        // The webhook stream's dead letters are not these.
        #expect(try json(try await run(stack, ["dlq", "list", "--json"]))["dead_letters"]?.arrayValue?.isEmpty == true)
        let queues = try json(try await run(stack, ["queues", "--json"]))
        let byName = Dictionary(
            uniqueKeysWithValues: (queues["streams"]?.arrayValue ?? []).compactMap { s in s["name"]?.stringValue.map { ($0, s) } })
        #expect(byName["jobs"]?["dead_letters"] == .number(1) && byName["push"]?["dead_letters"] == .number(1), "\(queues)")

        // Replayed onto the job stream with its own fields, it does not decode there either: dead again, not lost (and
        // replayed once: a replay of all takes the dead letters there were when it began, not those it causes).
        let replayed = try json(try await run(stack, ["dlq", "replay", "--stream", "jobs", "--json"]))
        #expect(replayed["replayed"] == .number(1))
        #expect(
            try await TestSupport.eventually {
                let letters = try await stack.redis.send("XRANGE", deadJobs, "-", "+").streamEntries
                return letters.count == 1 && letters.first?.fields["original_id"].map { String(decoding: $0, as: UTF8.self) } != badJob
            })
        let purged = try json(try await run(stack, ["dlq", "purge", "--stream", "push", "--yes", "--json"]))
        #expect(purged["purged"] == .number(1))
        #expect(try await stack.redis.send("XLEN", deadPushes).int == 0)
        #expect(try await stack.redis.send("XLEN", deadJobs).int == 1)
        await stack.shutdown()
    }

    @Test func pauseAndResumeAreRecordedForEveryProcessAndShownInQueues() async throws {
        let stack = try await Stack(store: .sqlite)
        let paused = try json(try await run(stack, ["pause", "push", "--json"]))
        #expect(paused["changed"] == .bool(true) && paused["paused"] == .bool(true))
        #expect(try json(try await run(stack, ["pause", "push", "--json"]))["changed"] == .bool(false))
        let queues = try json(try await run(stack, ["queues", "--json"]))
        let byName = Dictionary(
            uniqueKeysWithValues: (queues["streams"]?.arrayValue ?? []).compactMap { s in s["name"]?.stringValue.map { ($0, s) } })
        #expect(byName["push"]?["paused"] == .bool(true) && byName["push"]?["paused_since"]?.stringValue != nil)
        #expect(byName["webhooks"]?["paused"] == .bool(false) && byName["jobs"]?["paused"] == .bool(false))
        let table = try await run(stack, ["queues"])
        #expect(table.output.contains("stream        push") && table.output.contains("PAUSED since"))
        #expect(try json(try await run(stack, ["resume", "push", "--json"]))["changed"] == .bool(true))
        #expect(try await stack.redis.send("HLEN", RedisArgument(stack.keys.pausedStreams)).int == 0)
        #expect(try await run(stack, ["pause", "everything"]).code == 2)
        await stack.shutdown()
    }

    /// The race that matters: a consumer that is handed entries while it is pruned. Removing a consumer drops its
    /// pending entries from the group's pending list (nothing would ever reclaim them), so every entry delivered must
    /// still be pending afterwards, however the prune and the reads interleave.
    @Test func pruningNeverRemovesAConsumerThatHoldsEntries() async throws {
        let stack = try await Stack(store: .sqlite)
        let stream = RedisArgument(stack.keys.webhookStream(WebhookShard(index: 0)))
        _ = try await stack.redis.send("XGROUP", "CREATE", stream, "workers", "0", "MKSTREAM")
        _ = try await stack.redis.send("XADD", stream, "*", "n", "held")
        _ = try await stack.redis.send("XREADGROUP", "GROUP", "workers", "holder", "COUNT", 1, "STREAMS", stream, ">")
        _ = try await stack.redis.send("XGROUP", "CREATECONSUMER", stream, "workers", "gone")

        // Idle at least 0 ms: only the pending count protects a consumer here.
        let pruned = try await ConsumerPruner.prune(.webhooks, redis: stack.redis, keys: stack.keys, idleAtLeast: 0)
        #expect(pruned.map(\.consumer) == ["gone"])
        let consumers = try await QueueInspector.report(.webhooks, redis: stack.redis, keys: stack.keys).consumers
        #expect(consumers.map(\.name) == ["holder"] && consumers.first?.pending == 1)

        // A reader takes entries one at a time as "racer" and acks each, while pruning runs over and over: between an
        // ack and the next read the racer holds nothing and may be pruned; an entry delivered to it must never be lost
        // from the pending list by a prune (its ack would then find nothing: XACK answers 0).
        // Rounds of 200 until a prune has caught the racer between its reads (the scheduler decides when; most runs need
        // one round), each round checked whole.
        var removals = 0
        for _ in 0..<5 where removals == 0 {
            for n in 0..<200 { _ = try await stack.redis.send("XADD", stream, "*", "n", RedisArgument(n)) }
            let reader = Task {
                var acked = 0
                var lost = 0
                while acked + lost < 200 {
                    let reply = try await stack.redis.send("XREADGROUP", "GROUP", "workers", "racer", "COUNT", 1, "STREAMS", stream, ">")
                    for id in RedisStreamDriverTestsSupport.ids(reply) {
                        if try await stack.redis.send("XACK", stream, "workers", RedisArgument(id)).int == 1 { acked += 1 } else { lost += 1 }
                    }
                }
                return (acked, lost)
            }
            while (try? await stack.redis.send("XINFO", "GROUPS", stream).array?.first?.fieldMap["lag"]?.int) != 0 {
                removals += try await ConsumerPruner.prune(.webhooks, redis: stack.redis, keys: stack.keys, idleAtLeast: 0).count
            }
            let (acked, lost) = try await reader.value
            #expect(acked == 200 && lost == 0)
        }
        #expect(removals > 0, "the racer was pruned between its reads, so the race was run")
        let summary = try await stack.redis.send("XPENDING", stream, "workers").array ?? []
        #expect(summary.first?.int == 1, "only the holder's entry is pending")

        // Through the command: consumers seconds old are not pruned at the shortest idle it allows.
        let dry = try json(try await run(stack, ["consumers", "prune", "--idle", "60", "--dry-run", "--json"]))
        #expect(dry["pruned"] == .array([]) && dry["dry_run"] == .bool(true))
        #expect(try await run(stack, ["consumers", "prune", "--idle", "5"]).code == 2)
        let listed = try json(try await run(stack, ["consumers", "list", "--json"]))
        #expect(listed.arrayValue?.compactMap { $0["consumer"]?.stringValue }.contains("holder") == true)
        await stack.shutdown()
    }
}

enum RedisStreamDriverTestsSupport {
    /// The entry ids in an XREADGROUP reply.
    static func ids(_ reply: RedisValue) -> [String] {
        (reply.array ?? []).flatMap { stream -> [String] in
            guard let pair = stream.array, pair.count == 2 else { return [] }
            return pair[1].streamEntries.map(\.id)
        }
    }
}
