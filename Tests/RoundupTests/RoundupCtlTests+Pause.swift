import Foundation
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupTesting
import Testing

/// `roundupctl pause` against running processes: two workers and a pusher hold within a second, the ingress keeps
/// accepting, nothing is processed until `resume`, then everything once; the latency histograms move with the work.
extension RoundupCtlTests {
    /// The streams a process's `/readyz` lists as paused (nil when it does not answer).
    func pausedStreams(_ stack: Stack, port: Int) async -> [String]? {
        guard let ready = try? await stack.get(port: port, "/readyz"), ready.status == .ok else { return nil }
        return ready.json["paused"]?.arrayValue?.compactMap(\.stringValue)
    }

    /// The sum of one series over several processes' `/metrics`.
    func metricSum(_ stack: Stack, ports: [Int], _ series: String) async throws -> Double {
        var total = 0.0
        for port in ports { total += OperationsTests.value(try await stack.get(port: port, "/metrics").body, series) ?? 0 }
        return total
    }

    @Test(arguments: StoreBackend.available) func aPausedStreamAcceptsAtTheIngressAndProcessesNothingUntilResumedThenEverythingOnce(
        backend: StoreBackend
    ) async throws {
        let stack = try await Stack(store: backend)
        let apns = try await FakeAPNs.start()
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        try await stack.startIngress()
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        try await stack.startWorker(name: "w1")
        try await stack.startWorker(name: "w2")
        // No coalescing window: the push after the push pause is not deferred behind the burst before it.
        try await stack.startPusher(apns: apns, extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": "0"])
        let workers = [try #require(stack.workerPorts["w1"]), try #require(stack.workerPorts["w2"])]
        let pusher = try #require(stack.pusherPorts["p1"])
        let s = try await SyncSetup.make(stack, list: "Lpause", board: "Bpause")
        let device = #"{"device_id":"iphone","apns_token":"\#(String(repeating: "ab", count: 32))","platform":"ios","environment":"production"}"#
        #expect(try await stack.callAPI(.POST, "/dailyroundup/devices", token: s.token, body: device).status == .created)
        for port in workers { #expect(await pausedStreams(stack, port: port) == []) }

        // Pause: every worker says so within a second (the figure is printed for the notes).
        let pausing = ContinuousClock.now
        #expect(try json(try await run(stack, ["pause", "webhooks", "--json"]))["changed"] == .bool(true))
        var held = false
        while ContinuousClock.now - pausing < .seconds(5) {
            var all = true
            for port in workers where await pausedStreams(stack, port: port) != ["webhooks"] { all = false }
            if all {
                held = true
                break
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(held)
        print("pause held both workers after \(ContinuousClock.now - pausing) (\(backend))")
        for port in workers {
            let metrics = try await stack.get(port: port, "/metrics").body
            #expect(OperationsTests.value(metrics, #"roundup_stream_paused{stream="webhooks"}"#) == 1)
            #expect(OperationsTests.value(metrics, #"roundup_stream_paused{stream="jobs"}"#) == 0)
        }

        // Trello sends twenty webhooks (to the list's and the board's webhook): the ingress takes every one, the
        // workers process none.
        let sentBefore = stack.trello.webhooksSent
        var cards: [String] = []
        for n in 0..<20 { cards.append(stack.trello.userCreateCard(listID: "Lpause", name: "Paused \(n)")) }
        await stack.trello.waitForWebhookDeliveries()
        #expect(stack.trello.webhooksSent - sentBefore >= 20)
        try await Task.sleep(for: .milliseconds(1500))
        #expect(try await s.changes().isEmpty)
        let queues = try json(try await run(stack, ["queues", "--json"]))
        let webhooks = try #require(queues["streams"]?.arrayValue?.first { $0["name"] == "webhooks" })
        #expect(webhooks["paused"] == .bool(true) && webhooks["length"] == .number(20))
        // A read already waiting when the pause came may have taken what arrived in its last second: held, pending with
        // its worker, not processed. Everything else waits undelivered.
        guard case .number(let lag)? = webhooks["lag"], case .number(let pending)? = webhooks["pending"] else {
            Issue.record("no lag or pending: \(webhooks)")
            return
        }
        #expect(lag + pending == 20 && lag >= 10, "lag \(lag), pending \(pending)")
        if case .number(let waited)? = webhooks["oldest_waiting_age_ms"] { #expect(waited >= 1000) } else { Issue.record("no oldest waiting age") }
        #expect(try await metricSum(stack, ports: workers, "roundup_webhook_to_change_seconds_count") == 0)

        // Resume: each card becomes one change, once.
        #expect(try json(try await run(stack, ["resume", "webhooks", "--json"]))["changed"] == .bool(true))
        #expect(await TestSupport.eventually(timeout: .seconds(20)) { (try? await s.changes().count) == 20 })
        let changes = try await s.changes()
        #expect(Set(changes.compactMap { $0["trello_card_id"]?.stringValue }) == Set(cards))
        #expect(changes.allSatisfy { $0["change_type"] == "create" })
        #expect(await TestSupport.eventually { (try? await stack.streamLength()) == 0 })
        for port in workers { #expect(await pausedStreams(stack, port: port) == []) }

        // The latency histograms moved: every webhook timed once, its wait included; the push that followed too.
        #expect(await TestSupport.eventually { (try? await self.metricSum(stack, ports: workers, "roundup_webhook_to_change_seconds_count")) == 20 })
        let waited = try await metricSum(stack, ports: workers, "roundup_webhook_to_change_seconds_sum")
        #expect(waited >= 20 * 1.5, "each of the twenty waited out the pause: \(waited) s in all")
        #expect(
            await TestSupport.eventually { (try? await self.metricSum(stack, ports: [pusher], "roundup_change_to_push_seconds_count")) ?? 0 >= 1 })

        // Pushes paused: the pusher sends nothing, and sends once resumed.
        try await s.ack(changes)
        #expect(try json(try await run(stack, ["pause", "push", "--json"]))["changed"] == .bool(true))
        #expect(await TestSupport.eventually { await self.pausedStreams(stack, port: pusher) == ["push"] })
        let pushedBefore = apns.delivered.count
        let late = stack.trello.userCreateCard(listID: "Lpause", name: "While pushes wait")
        #expect(await TestSupport.eventually(timeout: .seconds(20)) { (try? await s.changes().map { $0["trello_card_id"]?.stringValue }) == [late] })
        try await Task.sleep(for: .milliseconds(1500))
        #expect(apns.delivered.count == pushedBefore)
        #expect(try json(try await run(stack, ["resume", "push", "--json"]))["changed"] == .bool(true))
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { apns.delivered.count > pushedBefore })
    }
}
