import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// roundup-pusher, the real process, against a fake APNs over HTTP/2 and TLS.
@Suite(.serialized) struct PusherTests {
    static func deviceToken(_ n: Int) -> String { String(format: "%064x", n + 0xABCDEF00) }

    /// An account with devices registered through the API.
    func account(_ stack: Stack, devices: [(id: String, environment: String)]) async throws -> (account: String, token: String) {
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: SyncSetup.bootstrap)
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        for (index, device) in devices.enumerated() {
            let body =
                #"{"device_id":"\#(device.id)","apns_token":"\#(Self.deviceToken(index))","platform":"ios","environment":"\#(device.environment)"}"#
            let response = try await stack.callAPI(.POST, "/dailyroundup/devices", token: token, body: body)
            #expect(response.status == .created, "\(response.body)")
        }
        return (account, token)
    }

    func push(_ stack: Stack, account: String, kind: String, exclude: String? = nil, conflictIDs: String? = nil) async throws {
        var arguments: [RedisArgument] = [RedisArgument(stack.keys.pushStream), "*", "account", RedisArgument(account), "kind", RedisArgument(kind)]
        if let exclude { arguments += ["exclude_device", RedisArgument(exclude)] }
        if let conflictIDs { arguments += ["reason", "conflict", "conflict_ids", RedisArgument(conflictIDs)] }
        _ = try await stack.redis.send(RedisCommand("XADD", arguments))
    }

    func start(_ backend: StoreBackend, window: Int = 30, extra: [String: String] = [:]) async throws -> (Stack, FakeAPNs) {
        let stack = try await Stack(store: backend)
        // Some tests push to one account's 60 devices: more than an account may register by default.
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: ["ROUNDUP_DEVICES_PER_ACCOUNT": "100"])
        let apns = try await FakeAPNs.start()
        try await stack.startPusher(apns: apns, extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": String(window)].merging(extra) { $1 })
        return (stack, apns)
    }

    @Test(arguments: StoreBackend.available) func backgroundAndAlertPushesCarryTheRightHeadersAndSkipTheSyncingDevice(
        backend: StoreBackend
    ) async throws {
        let (stack, apns) = try await start(backend)
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let (account, _) = try await account(stack, devices: [("iphone", "production"), ("mac", "sandbox"), ("ipad", "production")])
        try await push(stack, account: account, kind: "background", exclude: "ipad")
        #expect(await TestSupport.eventually { apns.delivered.count == 2 })
        let background = apns.delivered
        #expect(Set(background.map(\.deviceToken)) == [Self.deviceToken(0), Self.deviceToken(1)])
        for push in background {
            #expect(push.headers["apns-push-type"] == "background" && push.headers["apns-priority"] == "5")
            #expect(push.headers["apns-topic"] == apns.topic && push.headers["apns-collapse-id"] == "roundup-sync")
            #expect(Int(push.headers["apns-expiration"] ?? "") ?? 0 > Int(Date().timeIntervalSince1970))
            let payload = try JSONParser.parse(Array(push.payload.utf8))
            #expect(payload["aps"] == .object(["content-available": .number(1)]), "\(push.payload)")
            #expect(push.headers["apns-id"] == push.apnsID && UUID(uuidString: push.apnsID) != nil)
        }
        try await push(stack, account: account, kind: "alert", conflictIDs: "7,9")
        #expect(await TestSupport.eventually { apns.delivered.count == 5 })
        let alerts = apns.delivered.dropFirst(2)
        for push in alerts {
            #expect(push.headers["apns-push-type"] == "alert" && push.headers["apns-priority"] == "10")
            let payload = try JSONParser.parse(Array(push.payload.utf8))
            #expect(payload["aps"]?["category"] == "ROUNDUP_CONFLICT")
            #expect(payload["roundup"]?["conflict_ids"] == .array([.number(7), .number(9)]))
        }
        // One provider token for all of them: made once, not per request.
        #expect(Set(apns.delivered.map(\.token)).count == 1)
        await stack.shutdown()
        await apns.stop()
    }

    /// Two apps on one server: the iOS app (the default, `ROUNDUP_APNS_TOPIC`) and the macOS app (another team's key,
    /// from `ROUNDUP_APNS_APPS_FILE`). Each device's push carries its app's topic, is signed with its app's key, and
    /// travels on its app's own connection; a device of an app the server has no key for gets nothing and stops
    /// nothing.
    @Test(arguments: StoreBackend.available) func pushesForTwoAppsCarryEachAppsTopicAndKey(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        let apns = try await FakeAPNs.start()
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let mac = try apns.addApp(topic: "app.dailyroundup.macos", teamID: "MACTEAM001", keyID: "MACKEY0001")
        // The API knows the apps devices may register for; the pusher has keys for two of them.
        try await stack.startAPI(
            bootstrapToken: SyncSetup.bootstrap, extra: ["ROUNDUP_APP_BUNDLE_IDS": "\(apns.topic), \(mac.topic),app.other.unknown"])
        let file = stack.directory.appendingPathComponent("apns-apps.json")
        try #"[{"topic":"\#(mac.topic)","team_id":"\#(mac.teamID)","key_id":"\#(mac.keyID)","key_file":"\#(mac.keyFile)"}]"#
            .write(to: file, atomically: true, encoding: .utf8)
        try await stack.startPusher(apns: apns, extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": "0", "ROUNDUP_APNS_APPS_FILE": file.path])

        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: SyncSetup.bootstrap)
        let account = try #require(created.json["account_id"]?.stringValue)
        let token = try #require(created.json["auth_token"]?.stringValue)
        // (device, bundle id sent, environment); the watch's app has no key on this server.
        let devices: [(id: String, bundle: String?, environment: String)] = [
            ("iphone", nil, "production"), ("ipad", apns.topic, "production"), ("mac", mac.topic, "sandbox"),
            ("watch", "app.other.unknown", "production"),
        ]
        for (index, device) in devices.enumerated() {
            var body: [String: JSONValue] = [
                "device_id": .string(device.id), "apns_token": .string(Self.deviceToken(index)), "platform": device.id == "mac" ? "macos" : "ios",
                "environment": .string(device.environment),
            ]
            if let bundle = device.bundle { body["bundle_id"] = .string(bundle) }
            let response = try await stack.callAPI(.POST, "/dailyroundup/devices", token: token, body: JSONValue.object(body).canonicalJSON)
            #expect(response.status == .created, "\(response.body)")
            #expect(response.json["bundle_id"] == (device.bundle.map(JSONValue.string) ?? .null), "\(response.body)")
        }
        let bad = try await stack.callAPI(
            .POST, "/dailyroundup/devices", token: token,
            body:
                #"{"device_id":"x","apns_token":"\#(Self.deviceToken(9))","platform":"ios","environment":"production","bundle_id":"not a bundle id"}"#
        )
        #expect(bad.status == .unprocessableEntity && bad.json["error"]?["message"]?.stringValue?.contains("bundle_id") == true, "\(bad.body)")
        // A well-formed bundle id of an app the server does not serve: no account makes the pusher sign for it.
        let stranger = try await stack.callAPI(
            .POST, "/dailyroundup/devices", token: token,
            body:
                #"{"device_id":"y","apns_token":"\#(Self.deviceToken(8))","platform":"ios","environment":"production","bundle_id":"app.stranger.example"}"#
        )
        #expect(stranger.status == .unprocessableEntity && stranger.json["error"]?["code"] == "unknown_bundle_id", "\(stranger.body)")

        try await push(stack, account: account, kind: "background")
        #expect(await TestSupport.eventually { apns.delivered.count == 3 }, "\(apns.delivered.map(\.deviceToken))")
        try await Task.sleep(for: .milliseconds(300))
        let delivered = apns.delivered
        #expect(delivered.count == 3)
        func received(_ index: Int) -> FakeAPNs.Received? { delivered.first { $0.deviceToken == Self.deviceToken(index) } }
        let iphone = try #require(received(0))
        let ipad = try #require(received(1))
        let macPush = try #require(received(2))
        #expect(received(3) == nil, "the unknown app's device got a push")
        #expect(iphone.topic == apns.topic && iphone.keyID == apns.keyID)
        #expect(ipad.topic == apns.topic && ipad.keyID == apns.keyID)
        #expect(macPush.topic == mac.topic && macPush.keyID == mac.keyID)
        // The apps do not share a connection.
        #expect(macPush.connection != iphone.connection && macPush.connection != ipad.connection)
        // Nothing was refused: each topic went with the key of its team.
        #expect(apns.state.withLockedValue { $0.answered.allSatisfy { $0.status == 200 } })
        // The unknown app's device is kept (its app's key may come with the next restart).
        let listed = try await stack.callAPI(.GET, "/dailyroundup/devices", token: token).json["devices"]?.arrayValue ?? []
        #expect(listed.count == 4 && listed.contains { $0["device_id"] == "watch" && $0["bundle_id"] == "app.other.unknown" })
        await stack.shutdown()
        await apns.stop()
    }

    @Test(arguments: StoreBackend.available) func backgroundPushesAreCoalescedPerDeviceWithinTheWindow(backend: StoreBackend) async throws {
        let (stack, apns) = try await start(backend, window: 2)
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let (account, _) = try await account(stack, devices: [("iphone", "production")])
        for _ in 0..<6 { try await push(stack, account: account, kind: "background") }
        #expect(await TestSupport.eventually { apns.delivered.count >= 1 })
        try await Task.sleep(for: .milliseconds(800))
        #expect(apns.delivered.count == 1, "the window lets one through at once")
        // The rest fold into one more, sent when the window ends.
        #expect(await TestSupport.eventually(timeout: .seconds(6)) { apns.delivered.count == 2 })
        try await Task.sleep(for: .seconds(2.5))
        #expect(apns.delivered.count == 2)
        await stack.shutdown()
        await apns.stop()
    }

    /// A push coalesced to the end of the window, for an account an operator paused meanwhile, waits for the resume
    /// (as the account's pushes on the stream do), then goes.
    @Test func aCoalescedPushOfAPausedAccountWaitsForTheResume() async throws {
        let (stack, apns) = try await start(.sqlite, window: 3)
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let (account, _) = try await account(stack, devices: [("iphone", "production")])
        for _ in 0..<2 { try await push(stack, account: account, kind: "background") }
        #expect(await TestSupport.eventually { apns.delivered.count == 1 })
        _ = try await StreamPauses(redis: stack.redis, keys: stack.keys).pause(account: account)
        // Past the window's end (and the pusher's look at the pauses): the coalesced push waits.
        try await Task.sleep(for: .seconds(4.5))
        #expect(apns.delivered.count == 1, "held while the account is paused")
        #expect(try await stack.redis.send("ZCARD", RedisArgument(stack.keys.deferredPushes)).int == 1)
        _ = try await StreamPauses(redis: stack.redis, keys: stack.keys).resume(account: account)
        #expect(await TestSupport.eventually(timeout: .seconds(5)) { apns.delivered.count == 2 }, "sent once resumed")
        await stack.shutdown()
        await apns.stop()
    }

    @Test(arguments: StoreBackend.available) func unregisteredAndBadTokensRemoveTheDeviceAndAreNeverRetried(backend: StoreBackend) async throws {
        let (stack, apns) = try await start(backend, window: 0)
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let (account, token) = try await account(
            stack, devices: [("gone", "production"), ("bad", "production"), ("busy", "production"), ("ok", "production")])
        apns.fail(token: Self.deviceToken(0), status: 410, reason: "Unregistered")
        apns.fail(token: Self.deviceToken(1), status: 400, reason: "BadDeviceToken")
        apns.fail(token: Self.deviceToken(2), status: 503, reason: "ServiceUnavailable", times: 2)
        try await push(stack, account: account, kind: "background")
        let removed = await TestSupport.eventually {
            let devices = (try? await stack.callAPI(.GET, "/dailyroundup/devices", token: token).json["devices"]?.arrayValue) ?? []
            return Set(devices.compactMap { $0["device_id"]?.stringValue }) == ["busy", "ok"]
        }
        #expect(removed)
        #expect(await TestSupport.eventually { Set(apns.delivered.map(\.deviceToken)) == [Self.deviceToken(2), Self.deviceToken(3)] })
        let answered = apns.state.withLockedValue { $0.answered }
        #expect(answered.filter { $0.token == Self.deviceToken(0) }.count == 1)
        #expect(answered.filter { $0.token == Self.deviceToken(1) }.count == 1)
        // 503 twice, then delivered: retried with backoff.
        #expect(answered.filter { $0.token == Self.deviceToken(2) }.map(\.status) == [503, 503, 200])
        let metrics = try await stack.get(port: stack.pusherPorts["p1"] ?? 0, "/metrics").body
        #expect(
            metrics.contains(#"roundup_apns_sends_total{reason="Unregistered",status="410"} 1"#)
                || metrics.contains(#"roundup_apns_sends_total{status="410",reason="Unregistered"} 1"#), "\(metrics)")
        await stack.shutdown()
        await apns.stop()
    }

    @Test(arguments: StoreBackend.available) func anExpiredProviderTokenIsRenewedOnceAndThenReused(backend: StoreBackend) async throws {
        let (stack, apns) = try await start(backend, window: 0)
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let (account, _) = try await account(stack, devices: [("iphone", "production"), ("mac", "production")])
        try await push(stack, account: account, kind: "background")
        #expect(await TestSupport.eventually { apns.delivered.count == 2 })
        let first = try #require(apns.delivered.first)
        try await Task.sleep(for: .milliseconds(1100))
        apns.state.withLockedValue { $0.expiredBefore = first.issuedAt + 1 }
        for _ in 0..<3 { try await push(stack, account: account, kind: "background") }
        #expect(await TestSupport.eventually { apns.delivered.count == 8 })
        let tokens = apns.delivered.map(\.token)
        #expect(Set(tokens).count == 2, "renewed once, then reused")
        #expect(apns.delivered.dropFirst(2).allSatisfy { $0.issuedAt > first.issuedAt })
        let expired = apns.state.withLockedValue { $0.answered.filter { $0.reason == "ExpiredProviderToken" }.count }
        #expect(expired >= 1 && expired <= 2, "\(expired) requests saw the old token")
        await stack.shutdown()
        await apns.stop()
    }

    @Test(arguments: StoreBackend.available) func aGoAwayMidBurstLosesNoPushAndSendsNoneTwice(backend: StoreBackend) async throws {
        let (stack, apns) = try await start(backend, window: 0, extra: ["ROUNDUP_APNS_CONNECTIONS": "1"])
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        let devices = (0..<60).map { (id: "d\($0)", environment: "production") }
        let (account, _) = try await account(stack, devices: devices)
        apns.state.withLockedValue { $0.goAwayAfter = 20 }
        try await push(stack, account: account, kind: "alert", conflictIDs: "1")
        #expect(await TestSupport.eventually(timeout: .seconds(30)) { apns.delivered.count >= 60 })
        try await Task.sleep(for: .milliseconds(500))
        let delivered = apns.delivered
        #expect(delivered.count == 60, "\(delivered.count) delivered")
        #expect(Set(delivered.map(\.deviceToken)).count == 60)
        #expect(Set(delivered.map(\.apnsID)).count == 60)
        #expect(apns.state.withLockedValue { $0.goAwaysSent } == 1)
        #expect(Set(delivered.map(\.connection)).count >= 2, "the rest went over a new connection")
        await stack.shutdown()
        await apns.stop()
    }

    @Test(arguments: StoreBackend.available) func withoutCredentialsThePusherRefusesToStartNamingTheKeys(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        var env = stack.environment
        env["ROUNDUP_APNS_TOPIC"] = "app.dailyroundup.ios"
        let process = try ManagedProcess(
            name: "pusher-nokeys", executable: TestSupport.binDirectory.appendingPathComponent("roundup-pusher"), environment: env,
            logDirectory: stack.directory)
        let code = await process.wait(timeout: .seconds(20))
        #expect(code == 78)
        #expect(
            process.output.contains("ROUNDUP_APNS_KEY_FILE") && process.output.contains("ROUNDUP_APNS_KEY_ID")
                && process.output.contains("ROUNDUP_APNS_TEAM_ID"))
        #expect(!process.output.contains("ROUNDUP_APNS_TOPIC,"))

        // In a pod whose API must run without APNs: the pusher idles, alive but not ready, and stops cleanly.
        let port = try TestSupport.freePort()
        env["ROUNDUP_PUSHER_WITHOUT_APNS"] = "idle"
        env["ROUNDUP_PUSHER_PORT"] = String(port)
        let idle = try ManagedProcess(
            name: "pusher-idle", executable: TestSupport.binDirectory.appendingPathComponent("roundup-pusher"), environment: env,
            logDirectory: stack.directory)
        #expect(await TestSupport.eventually { (try? await stack.get(port: port, "/healthz").status) == .ok }, "\(idle.output)")
        let ready = try await stack.get(port: port, "/readyz")
        #expect(ready.status == .serviceUnavailable && ready.json["error"]?["message"]?.stringValue?.contains("APNs is not configured") == true)
        idle.signal(SIGTERM)
        #expect(await idle.wait(timeout: .seconds(10)) == 0)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aSignedTrelloWebhookEndsAsAPushOnTheDevice(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let apns = try await FakeAPNs.start()
        try await stack.startPusher(apns: apns)
        let s = try await SyncSetup.make(stack, list: "Lpush", board: "Bpush")
        let device = #"{"device_id":"iphone","apns_token":"\#(Self.deviceToken(42))","platform":"ios","environment":"production"}"#
        #expect(try await stack.callAPI(.POST, "/dailyroundup/devices", token: s.token, body: device).status == .created)
        // Someone adds a card in Trello: Trello signs the webhook, the ingress takes it, the worker makes a change,
        // and the phone is woken.
        let card = stack.trello.userCreateCard(listID: "Lpush", name: "Pick up the parcel")
        #expect(await TestSupport.eventually(timeout: .seconds(20)) { apns.delivered.contains { $0.deviceToken == Self.deviceToken(42) } })
        let changes = try await s.changes()
        #expect(changes.map { $0["trello_card_id"] } == [.string(card)])
        #expect(apns.delivered.first?.headers["apns-push-type"] == "background")
        await stack.shutdown()
        await apns.stop()
    }
}
