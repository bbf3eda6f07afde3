import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// `roundupctl pause account` with the real processes: one account contained, the others flowing.
extension RoundupCtlTests {
    /// A runaway account paused: Trello's webhooks for it are still accepted (200) and kept, but nothing of it is
    /// applied and its sync job stays queued, across a worker restart, while another account flows; `find` and
    /// `queues` show it; resumed, what waited is applied and the job runs; each entry once, nothing dead-lettered.
    @Test func oneAccountIsContainedWhileTheOthersFlow() async throws {
        let stack = try await Stack(store: .sqlite)
        let fast = ["ROUNDUP_CLAIM_IDLE_MS": "1500"]
        try await stack.startIngress()
        try await stack.startWorker(name: "w1", extra: fast)
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let runaway = try await SyncSetup.make(stack, list: "Lrunaway", board: "Brunaway")
        let other = try await SyncSetup.make(stack, list: "Lother", board: "Bother")
        let apns = try await FakeAPNs.start()
        try await stack.startPusher(apns: apns, extra: fast.merging(["ROUNDUP_PUSH_WINDOW_SECONDS": "0"]) { $1 })
        for (setup, token) in [(runaway, String(repeating: "aa", count: 32)), (other, String(repeating: "bb", count: 32))] {
            let body = #"{"device_id":"phone","apns_token":"\#(token)","platform":"ios","environment":"production"}"#
            #expect(try await stack.callAPI(.POST, "/dailyroundup/devices", token: setup.token, body: body).status == .created)
        }

        let paused = try json(try await run(stack, ["pause", "account", runaway.account, "--json"]))
        #expect(paused["changed"] == .bool(true) && paused["account"]?.stringValue == runaway.account)
        #expect(try json(try await run(stack, ["pause", "account", runaway.account, "--json"]))["changed"] == .bool(false))
        try await Task.sleep(for: .seconds(1.5))  // every worker sees it within a second

        let held = (0..<5).map { stack.trello.userCreateCard(listID: "Lrunaway", name: "Runaway \($0)") }
        let flowing = (0..<3).map { stack.trello.userCreateCard(listID: "Lother", name: "Other \($0)") }
        await stack.trello.waitForWebhookDeliveries()
        #expect(stack.trello.state.withLockedValue { $0.webhookFailures } == 0, "every webhook accepted the first time or on a retry")
        #expect(try await TestSupport.eventually(timeout: .seconds(20)) { try await other.changes().count == flowing.count }, "the others flow")
        #expect(await TestSupport.eventually { apns.delivered.contains { $0.deviceToken == String(repeating: "bb", count: 32) } }, "and are woken")
        // A push for the paused account (as the API or a job would ask for one) holds.
        _ = try await stack.redis.send(
            RedisCommand("XADD", [RedisArgument(stack.keys.pushStream), "*", "account", RedisArgument(runaway.account), "kind", "background"]))
        let job = try await runaway.post([runaway.change("create", reminder: "R-held", fields: ["title": "Made while paused"])])
        #expect(job.status == .accepted, "\(job.body)")
        let jobID = try #require(job.json["job_id"]?.stringValue)
        try await Task.sleep(for: .seconds(3))  // two claim timeouts: reclaimed and held again
        #expect(try await runaway.changes().isEmpty, "nothing of the paused account applied")
        #expect(!apns.delivered.contains { $0.deviceToken == String(repeating: "aa", count: 32) }, "its pushes hold")
        #expect(try await stack.callAPI(.GET, "/dailyroundup/sync/jobs/\(jobID)", token: runaway.token).json["status"] == "queued")
        let found = try json(try await run(stack, ["find", "--account", runaway.account, "--json"]))
        let places = found["found"]?.arrayValue ?? []
        #expect(places.count == held.count && places.allSatisfy { $0["place"] == "pending" }, "\(found)")
        #expect(places.allSatisfy { $0["error"]?.stringValue?.hasPrefix("account_paused") == true }, "\(found)")
        let queues = try json(try await run(stack, ["queues", "--json"]))
        #expect(queues["paused_accounts"]?.arrayValue?.compactMap { $0["account"]?.stringValue } == [runaway.account])

        // A worker restart keeps it contained: the pause is in Redis.
        await stack.workers[0].stop()
        try await stack.startWorker(name: "w2", extra: fast)
        stack.trello.userCreateCard(listID: "Lother", name: "Other after the restart")
        await stack.trello.waitForWebhookDeliveries()
        #expect(try await TestSupport.eventually(timeout: .seconds(20)) { try await other.changes().count == flowing.count + 1 })
        try await Task.sleep(for: .seconds(2))
        #expect(try await runaway.changes().isEmpty)

        let resumed = try json(try await run(stack, ["resume", "account", runaway.account, "--json"]))
        #expect(resumed["changed"] == .bool(true))
        // (The job's card is news for the account's other devices too: a change of its own beside the cards' creates.)
        func creates() async throws -> [String] {
            try await runaway.changes().filter { $0["change_type"] == "create" }.compactMap { $0["trello_card_id"]?.stringValue }
        }
        #expect(
            try await TestSupport.eventually(timeout: .seconds(30)) { try await creates().sorted() == held.sorted() },
            "what waited is applied once resumed, each once")
        #expect(await TestSupport.eventually { apns.delivered.contains { $0.deviceToken == String(repeating: "aa", count: 32) } }, "its pushes go")
        let ended = try await runaway.wait(job: jobID)
        #expect(ended["status"] == "completed", "\(ended)")
        #expect(stack.trello.openCards(inList: "Lrunaway").count == held.count + 1, "the job's card made once")
        #expect(try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys) == 0)
        #expect(try json(try await run(stack, ["queues", "--json"]))["paused_accounts"]?.arrayValue?.isEmpty == true)

        let bad = try await run(stack, ["pause", "account"])
        #expect(bad.code != 0 && bad.output.contains("name the account"), "\(bad.output)")
        let wrong = try await run(stack, ["pause", "everything"])
        #expect(wrong.code != 0 && wrong.output.contains("webhooks, jobs or push"), "\(wrong.output)")
        await stack.shutdown()
        await apns.stop()
    }
}
