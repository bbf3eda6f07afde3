import Foundation
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// `roundupctl find`: where one webhook event is now, by action, card or account, with the real processes.
extension RoundupCtlTests {
    /// A card made in Trello goes through the real ingress and worker: `find --card` (and `--action`, with the action id
    /// it printed) shows it applied, with the change it made. Events put in a shard by hand show where they are: one
    /// delivered to a consumer and failing (pending: with whom, how often, its last error), one not yet delivered
    /// (waiting), one given up (a dead letter with its error).
    @Test func findSaysWhereAnEventIsNow() async throws {
        let stack = try await Stack(store: .sqlite)
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lfind", board: "Bfind")
        let card = stack.trello.userCreateCard(listID: "Lfind", name: "Find me")
        await stack.trello.waitForWebhookDeliveries()
        #expect(try await TestSupport.eventually(timeout: .seconds(20)) { try await s.changes().count == 1 })

        let byCard = try json(try await run(stack, ["find", "--card", card, "--json"]))
        let applied = try #require(byCard["found"]?.arrayValue?.first, "\(byCard)")
        #expect(applied["place"] == "applied" && applied["account"]?.stringValue == s.account && applied["card"]?.stringValue == card)
        #expect(applied["change"]?["kind"]?.stringValue != nil, "\(applied)")
        let action = try #require(applied["action"]?.stringValue)
        let byAction = try json(try await run(stack, ["find", "--action", action, "--account", s.account, "--json"]))
        #expect(byAction["found"]?.arrayValue?.allSatisfy { $0["place"] == "applied" && $0["action"]?.stringValue == action } == true)
        #expect(byAction["found"]?.arrayValue?.isEmpty == false && byAction["searched_accounts"] == .number(1))

        // By hand, in shard 0, with the workers paused: a failing event, a waiting one, a dead letter.
        #expect(try await run(stack, ["pause", "webhooks"]).code == 0)
        try await Task.sleep(for: .seconds(1.5))  // the workers hold within a second
        let shard = WebhookShard(index: 0)
        let stream = RedisArgument(stack.keys.webhookStream(shard))
        func event(_ action: String, card: String) -> [RedisArgument] {
            [
                "account", "acct-find", "action", RedisArgument(action), "type", "updateCard", "received", "1700000000000", "body",
                RedisArgument(#"{"action":{"id":"\#(action)","type":"updateCard","data":{"card":{"id":"\#(card)"}}}}"#),
            ]
        }
        _ = try? await stack.redis.send("XGROUP", "CREATE", stream, RedisArgument(RoundupStream.webhooks.group(stack.keys)), "0", "MKSTREAM")
        let failing = try #require(try await stack.redis.send(RedisCommand("XADD", [stream, "*"] + event("act-failing", card: "card-f"))).string)
        _ = try await stack.redis.send(
            "XREADGROUP", "GROUP", RedisArgument(RoundupStream.webhooks.group(stack.keys)), "worker-x", "COUNT", 1, "STREAMS", stream, ">")
        _ = try await stack.redis.send(
            "HSET", RedisArgument(stack.keys.webhookErrors(shard)), RedisArgument(failing), "trello_transient\tcard fetch: 502",
            RedisArgument(StreamAttempt.field(failing)), "1700000000000\tworker-x\ttrello_transient\tcard fetch: 502")
        // The waiting one was enqueued with tracing on: it carries its trace.
        let traced: [RedisArgument] = ["traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]
        let waiting = try #require(
            try await stack.redis.send(RedisCommand("XADD", [stream, "*"] + event("act-waiting", card: "card-w") + traced)).string)
        _ = try await stack.redis.send(
            RedisCommand(
                "XADD",
                [RedisArgument(stack.keys.deadLetterStream(shard)), "*"] + event("act-dead", card: "card-d")
                    + [
                        "error", "store\tdisk full", "deliveries", "5", "failed_at", "1700000000000", "attempts",
                        "1699999990000\tworker-y\ttrello_transient\ttimeout\n1700000000000\tworker-x\tstore\tdisk full",
                    ]))

        let byAccount = try json(try await run(stack, ["find", "--account", "acct-find", "--json"]))
        let places = byAccount["found"]?.arrayValue ?? []
        #expect(places.map { $0["place"]?.stringValue ?? "" } == ["pending", "waiting", "dead_letter"], "\(byAccount)")
        #expect(places.first?["id"]?.stringValue == "0:\(failing)" && places.first?["consumer"] == "worker-x")
        #expect(places.first?["deliveries"] == .number(1) && places.first?["error"] == "trello_transient: card fetch: 502")
        #expect(places.dropFirst().first?["id"]?.stringValue == "0:\(waiting)" && places.dropFirst().first?["card"] == "card-w")
        #expect(places.dropFirst().first?["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" && places.first?["trace_id"] == nil)
        #expect(places.last?["error"] == "store: disk full" && places.last?["action"] == "act-dead")
        // Each one's attempts: when, by whom, with what.
        #expect(places.first?["attempts"]?.arrayValue?.map { $0["consumer"]?.stringValue ?? "" } == ["worker-x"])
        #expect(places.last?["attempts"]?.arrayValue?.map { $0["error"]?.stringValue ?? "" } == ["trello_transient: timeout", "store: disk full"])
        #expect(places.last?["attempts"]?.arrayValue?.first?["at"] == "2023-11-14T22:13:10.000Z")
        let onlyOne = try json(try await run(stack, ["find", "--card", "card-w", "--json"]))
        #expect(onlyOne["found"]?.arrayValue?.map { $0["action"]?.stringValue ?? "" } == ["act-waiting"])
        let text = try await run(stack, ["find", "--action", "act-failing"])
        #expect(text.code == 0 && text.output.contains("pending  0:\(failing)") && text.output.contains("with worker-x"), "\(text.output)")
        #expect(text.output.contains("    attempt 2023-11-14T22:13:20.000Z  by worker-x  trello_transient: card fetch: 502"), "\(text.output)")
        let nothing = try await run(stack, ["find", "--action", "act-never"])
        #expect(nothing.code == 0 && nothing.output.contains("nothing found"), "\(nothing.output)")
        let none = try await run(stack, ["find"])
        #expect(none.code != 0 && none.output.contains("--action, --card or --account"), "\(none.output)")
        await stack.shutdown()
    }
}
