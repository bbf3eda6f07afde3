import Foundation
import GRDB
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting

/// The scenarios that need more than "a fault while the load runs".
enum ChaosScenarios {
    /// An account made through the API (so the app has a token), with list L1 and the cards in the fake Trello.
    static func apiAccount(_ stack: Stack, cards: Int, prefix: String) async throws -> (account: String, token: String) {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: Chaos.bootstrap)
        guard created.status == .created, let account = created.json["account_id"]?.stringValue, let token = created.json["auth_token"]?.stringValue
        else {
            throw StackError("account creation failed: \(created.status) \(created.body)")
        }
        let store = try await stack.store()
        try await store.updateAccountCredentials(id: account, apiKey: "test-api-key", token: "test-token", webhookSecret: Chaos.secret)
        _ = try await store.createSyncList(accountID: account, name: "Chaos", trelloBoardID: "B1", trelloListID: "L1")
        for i in 0..<cards { stack.trello.setCard(FakeTrello.card(id: "\(prefix)\(i)", listID: "L1", boardID: "B1", name: "Task \(i)")) }
        return (account, token)
    }

    /// What an app does: pulls pages after the last id it saw and acks them; remembers every create it got per card.
    final class App: @unchecked Sendable {
        // @unchecked: `creates` and `afterID` are used from one task at a time (the pulling loop, then the final pull).
        var creates: [String: Int] = [:]
        var afterID: Int64 = 0
        var failures = 0

        func pullOnce(_ stack: Stack, token: String) async -> Bool {
            guard let page = try? await stack.callAPI(.GET, "/dailyroundup/changes?after_id=\(afterID)&limit=100", token: token), page.status == .ok
            else {
                failures += 1
                return false
            }
            let changes = page.json["changes"]?.arrayValue ?? []
            var ids: [Int64] = []
            for change in changes {
                guard case .number(let id)? = change["id"], let card = change["trello_card_id"]?.stringValue else { continue }
                ids.append(Int64(id))
                if change["change_type"] == .string("create") { creates[card, default: 0] += 1 }
            }
            guard !ids.isEmpty else { return false }
            // A lost ack answer is harmless: the next pull starts after these ids, and an acked change is gone.
            let acks = ids.map { #"{"id":\#($0),"reminder_id":"r\#($0)"}"# }.joined(separator: ",")
            if (try? await stack.callAPI(.POST, "/dailyroundup/changes/ack", token: token, body: #"{"acks":[\#(acks)]}"#))?.status != .ok {
                failures += 1
            }
            afterID = ids.max() ?? afterID
            return page.json["has_more"] == .bool(true)
        }
    }

    /// A stack with the API and a fake APNs, an account with `cards` cards and these devices (id → APNs token).
    static func pushStack(cards: Int, prefix: String, devices: [(id: String, token: String)]) async throws -> (Stack, FakeAPNs, account: String) {
        let stack = try await Stack()
        try await stack.startAPI(bootstrapToken: Chaos.bootstrap)
        let apns = try await FakeAPNs.start()
        let (account, token) = try await apiAccount(stack, cards: cards, prefix: prefix)
        for device in devices {
            let body = #"{"device_id":"\#(device.id)","apns_token":"\#(device.token)","platform":"ios","environment":"production"}"#
            guard try await stack.callAPI(.POST, "/dailyroundup/devices", token: token, body: body).status == .created else {
                throw StackError("could not register device \(device.id)")
            }
        }
        return (stack, apns, account)
    }

    static func killAPI() async throws -> ChaosRow {
        var row = ChaosRow(name: "kill-api", fault: "SIGKILL the API ×3 while an app pulls and acks")
        let stack = try await Stack()
        try await stack.startAPI(bootstrapToken: Chaos.bootstrap)
        let prefix = "Capi"
        let (account, token) = try await apiAccount(stack, cards: 300, prefix: prefix)
        try await stack.startWorker(name: "w1", extra: Chaos.worker)
        try await stack.startIngress()
        row.sent = 300
        let app = App()
        let pulling = Task {
            while !Task.isCancelled {
                if await !app.pullOnce(stack, token: token) { try? await Task.sleep(for: .milliseconds(100)) }
            }
        }
        async let accepted = WebhookLoad(count: 300, perSecond: 100).run(stack, account: account, cardPrefix: prefix)
        row.notes += try await killRepeatedly(times: 3, every: .milliseconds(800)) {
            stack.api?.signal(SIGKILL)
            _ = await stack.api?.wait()
        } restart: {
            try await stack.startAPI(bootstrapToken: Chaos.bootstrap)
        }
        let done = await accepted
        _ = await TestSupport.eventually(timeout: .seconds(60)) { (try? await stack.streamLength()) == 0 }
        pulling.cancel()
        _ = await pulling.value
        while await app.pullOnce(stack, token: token) {}
        _ = await app.pullOnce(stack, token: token)
        row.accepted = done.count
        row.applied = done.filter { app.creates[$0] != nil }.count
        row.duplicated = app.creates.values.filter { $0 > 1 }.count
        row.deadLettered = try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys)
        row.lost = max(0, row.accepted - row.applied - row.deadLettered)
        row.notes.append("applied = cards the app received through the API (pulled and acked); \(app.failures) API calls failed while it was down")
        await stack.shutdown()
        return row
    }

    static func killPusher() async throws -> ChaosRow {
        var row = ChaosRow(name: "kill-pusher", fault: "SIGKILL the pusher ×3 while changes queue pushes")
        let prefix = "Cpush"
        let (stack, apns, account) = try await pushStack(cards: 300, prefix: prefix, devices: [("phone", String(format: "%064x", 0xC4A05))])
        let pusherEnv = ["ROUNDUP_PUSH_WINDOW_SECONDS": "0"]
        try await stack.startPusher(apns: apns, name: "p1", extra: pusherEnv)
        try await stack.startWorker(name: "w1", extra: Chaos.worker)
        try await stack.startIngress()
        row.sent = 300
        async let accepted = WebhookLoad(count: 300, perSecond: 100).run(stack, account: account, cardPrefix: prefix)
        row.notes += try await killRepeatedly(times: 3, every: .milliseconds(800)) {
            stack.pushers.last?.signal(SIGKILL)
            _ = await stack.pushers.last?.wait()
        } restart: {
            try await stack.startPusher(apns: apns, name: "p\(stack.pushers.count + 1)", extra: pusherEnv)
        }
        let done = await accepted
        try await Chaos.settle(stack, account: account, accepted: done, row: &row)
        // A killed pusher's entries are taken over after 30 s of idleness.
        let settled = await TestSupport.eventually(timeout: .seconds(90), interval: .milliseconds(500)) {
            (try? await stack.redis.send("XLEN", RedisArgument(stack.keys.pushStream)).int) == 0
        }
        let left = try await stack.redis.send("XLEN", RedisArgument(stack.keys.pushStream)).int ?? -1
        row.notes.append("push entries left unsettled: **\(left)**\(settled ? "" : " after 90 s"); pushes delivered to APNs: \(apns.delivered.count)")
        if left != 0 { row.lost += left }
        await stack.shutdown()
        await apns.stop()
        return row
    }

    static func redisCrash(fsync: String) async throws -> ChaosRow {
        try await Chaos.run(
            "redis-crash-\(fsync)", fault: "SIGKILL redis-server (AOF on, appendfsync \(fsync)) mid-load, restart after 1 s",
            redisArguments: ["--appendonly", "yes", "--appendfsync", fsync]
        ) { stack in
            try await Task.sleep(for: .milliseconds(1200))
            await stack.privateRedis?.crash()
            try await Task.sleep(for: .seconds(1))
            try await stack.privateRedis?.start()
            return ["the ingress answered 503 while Redis was down; Trello's retries (simulated) came back"]
        }
    }

    static func sqliteLocked() async throws -> ChaosRow {
        try await Chaos.run("sqlite-locked", fault: "another process holds SQLite's write lock for 12 s (busy timeout 10 s)") { stack in
            try await Task.sleep(for: .milliseconds(800))
            let queue = try DatabaseQueue(path: stack.databasePath)
            try await Task.detached {
                try queue.inTransaction(.exclusive) { _ in
                    Thread.sleep(forTimeInterval: 12)
                    return .commit
                }
            }.value
            return ["worker writes failed with SQLITE_BUSY and were retried"]
        }
    }

    static func postgresRestart() async throws -> ChaosRow {
        let environment = ProcessInfo.processInfo.environment
        guard environment["ROUNDUP_TEST_POSTGRES_URL"] != nil, environment["ROUNDUP_TEST_PG_CTL"] != nil else {
            return ChaosRow(name: "postgres-restart", fault: "skipped", notes: ["no PostgreSQL: scripts/chaos starts one"])
        }
        return try await Chaos.run("postgres-restart", fault: "PostgreSQL stopped for 3 s mid-load (store on PostgreSQL)", store: .postgres) { _ in
            try await Task.sleep(for: .milliseconds(1000))
            try await TestStore.postgresControl("stop")
            try await Task.sleep(for: .seconds(3))
            try await TestStore.postgresControl("start")
            return ["batches failed on the store were retried, none dead-lettered"]
        }
    }

    static func deletedCards() async throws -> ChaosRow {
        var row = ChaosRow(name: "trello-deleted-card", fault: "every 5th card deleted in Trello before the worker reads it (404)")
        let stack = try await Stack()
        let prefix = "Cdel"
        let account = try await Chaos.seed(stack, cards: 300, prefix: prefix)
        let gone = Set(stride(from: 0, to: 300, by: 5).map { "\(prefix)\($0)" })
        for card in gone { stack.trello.userDeleteCard(id: card) }
        try await stack.startWorker(name: "w1", extra: Chaos.worker)
        try await stack.startWorker(name: "w2", extra: Chaos.worker)
        try await stack.startIngress()
        row.sent = 300
        let accepted = await WebhookLoad(count: 300, perSecond: 100).run(stack, account: account, cardPrefix: prefix)
        try await Chaos.settle(stack, account: account, accepted: accepted.subtracting(gone), row: &row)
        let store = try await stack.store()
        let changes = try await store.pendingChanges(accountID: account, afterID: 0, limit: 1_000_000)
        let forGone = changes.filter { gone.contains($0.trelloCardID) }.count
        row.accepted = accepted.count
        row.notes.append("\(gone.count) deleted cards: \(forGone) changes made for them (expected 0: the card never reached the list)")
        row.lost += forGone
        await stack.shutdown()
        return row
    }

    static func apnsFaults() async throws -> ChaosRow {
        var row = ChaosRow(name: "apns-faults", fault: "APNs: GOAWAY after 5 streams, 503 ×3, 410 for one device, provider token expired mid-run")
        let prefix = "Capns"
        let good = String(format: "%064x", 0xA11CE), stale = String(format: "%064x", 0xDEAD)
        let (stack, apns, account) = try await pushStack(cards: 200, prefix: prefix, devices: [("phone", good), ("old-ipad", stale)])
        apns.fail(token: stale, status: 410, reason: "Unregistered")
        apns.fail(token: good, status: 503, reason: "ServiceUnavailable", times: 3)
        apns.state.withLockedValue { $0.goAwayAfter = 5 }
        try await stack.startPusher(apns: apns, name: "p1", extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": "0"])
        try await stack.startWorker(name: "w1", extra: Chaos.worker)
        try await stack.startIngress()
        row.sent = 200
        async let accepted = WebhookLoad(count: 200, perSecond: 100).run(stack, account: account, cardPrefix: prefix)
        _ = await TestSupport.eventually(timeout: .seconds(20)) { !apns.delivered.isEmpty }
        try await Task.sleep(for: .milliseconds(1100))
        // The token in use is now expired (as APNs says after an hour): the pusher must renew it once and carry on.
        // Expired = issued in or before the second of the newest token seen, which is over a second old by now.
        let newest = apns.delivered.map(\.issuedAt).max() ?? Int(Date().timeIntervalSince1970) - 2
        apns.state.withLockedValue { $0.expiredBefore = newest + 1 }
        let done = await accepted
        try await Chaos.settle(stack, account: account, accepted: done, row: &row)
        // Pushes sent after the expiry for certain (the load may have finished first), each must still arrive.
        let before = apns.delivered.filter { $0.deviceToken == good }.count
        for _ in 0..<5 {
            _ = try await stack.redis.send(
                .streamAppend(stack.keys.pushStream, fields: PushRequest.background(account: account, reason: .changes).fields))
        }
        let afterExpiry = await TestSupport.eventually(timeout: .seconds(30)) { apns.delivered.filter { $0.deviceToken == good }.count >= before + 5 }
        if !afterExpiry { row.notes.append("pushes queued after the token expired did not all arrive") }
        _ = await TestSupport.eventually(timeout: .seconds(60), interval: .milliseconds(500)) {
            (try? await stack.redis.send("XLEN", RedisArgument(stack.keys.pushStream)).int) == 0
        }
        let left = try await stack.redis.send("XLEN", RedisArgument(stack.keys.pushStream)).int ?? -1
        let devices = try await (try await stack.store()).devices(accountID: account).map(\.deviceID)
        let answered = apns.state.withLockedValue { $0.answered }
        let byStatus = Dictionary(grouping: answered, by: { "\($0.status)\($0.reason.map { " " + $0 } ?? "")" }).mapValues(\.count)
        let delivered = apns.delivered.filter { $0.deviceToken == good }.count
        row.notes.append(
            "APNs answers \(byStatus.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ")); GOAWAYs sent \(apns.state.withLockedValue { $0.goAwaysSent })"
        )
        row.notes.append(
            "pushes delivered to the live device: \(delivered); devices left: \(devices) (the 410 one removed: \(!devices.contains("old-ipad"))); push entries unsettled: **\(left)**"
        )
        if left != 0 || devices.contains("old-ipad") || delivered == 0 || !afterExpiry { row.lost += max(left, 1) }
        await stack.shutdown()
        await apns.stop()
        return row
    }

    static func apnsTimeouts() async throws -> ChaosRow {
        var row = ChaosRow(name: "apns-timeouts", fault: "APNs never answers the next 4 pushes (the pusher's 10 s timeout fires)")
        let prefix = "Cstall"
        let device = String(format: "%064x", 0x57A11)
        let (stack, apns, account) = try await pushStack(cards: 100, prefix: prefix, devices: [("phone", device)])
        apns.state.withLockedValue { $0.stallNext = 4 }
        try await stack.startPusher(apns: apns, name: "p1", extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": "0"])
        try await stack.startWorker(name: "w1", extra: Chaos.worker)
        try await stack.startIngress()
        row.sent = 100
        let done = await WebhookLoad(count: 100, perSecond: 50).run(stack, account: account, cardPrefix: prefix)
        try await Chaos.settle(stack, account: account, accepted: done, row: &row)
        let settled = await TestSupport.eventually(timeout: .seconds(90), interval: .milliseconds(500)) {
            (try? await stack.redis.send("XLEN", RedisArgument(stack.keys.pushStream)).int) == 0
        }
        let stalled = apns.state.withLockedValue { $0.stalled }
        let delivered = apns.delivered.filter { $0.deviceToken == device }.count
        row.notes.append(
            "\(stalled) pushes went unanswered and were sent again after the timeout; \(delivered) delivered; push entries settled: \(settled)")
        if !settled || delivered == 0 || stalled != 4 { row.lost += 1 }
        await stack.shutdown()
        await apns.stop()
        return row
    }
}
