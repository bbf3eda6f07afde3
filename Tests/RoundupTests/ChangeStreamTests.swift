import Foundation
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// `GET /dailyroundup/changes/stream` through the real processes: replay, resumption without gaps, announcements
/// across API processes, limits, shutdown, and pushes held back from a device that streams.
@Suite(.serialized) struct ChangeStreamTests {
    func open(_ stack: Stack, token: String, port: Int? = nil, query: String = "", headers: [String: String] = [:]) async throws -> EventStreamReader
    {
        var all = headers
        all["authorization"] = "Bearer \(token)"
        return try await EventStreamReader.open(
            url: "http://127.0.0.1:\(port ?? stack.apiPort)/dailyroundup/changes/stream\(query)", headers: all)
    }

    /// The change of each event, parsed.
    func changes(_ reader: EventStreamReader) -> [JSONValue] {
        reader.events.compactMap { try? JSONParser.parse(Array($0.data.utf8)) }
    }

    @Test(arguments: StoreBackend.available) func changesWrittenWhileNoStreamWasOpenAreReplayedFromTheClientsPosition(
        backend: StoreBackend
    ) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lreplay", board: "Breplay")
        let cards = (1...5).map { stack.trello.userCreateCard(listID: "Lreplay", name: "Card \($0)") }
        #expect(try await TestSupport.eventually { try await s.changes().count == 5 })
        let page = try await s.changes()

        let stream = try await open(stack, token: s.token)
        #expect(stream.status == .ok)
        #expect(stream.headers["content-type"].first == "text/event-stream")
        #expect(stream.headers["x-request-id"].first?.isEmpty == false)
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { stream.events.count == 5 })
        // Each event is the page's change, with the change id as its event id.
        #expect(changes(stream) == page)
        #expect(stream.events.map(\.id) == page.map { $0["id"].map { "\(Int($0.numberValue ?? -1))" } })
        #expect(stream.events.allSatisfy { $0.event == "change" })
        #expect(Set(changes(stream).compactMap { $0["trello_card_id"]?.stringValue }) == Set(cards))
        await stream.close()

        // Reconnecting after the second change: the three after it, and nothing else.
        let second = try #require(stream.events[1].id)
        let resumed = try await open(stack, token: s.token, headers: ["Last-Event-ID": second])
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { resumed.events.count == 3 })
        try await Task.sleep(for: .milliseconds(300))
        #expect(resumed.events.map(\.id) == stream.events.dropFirst(2).map(\.id))
        await resumed.close()
        // after_id does the same; Last-Event-ID wins over it.
        let both = try await open(stack, token: s.token, query: "?after_id=0", headers: ["Last-Event-ID": try #require(stream.events[3].id)])
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { both.events.count == 1 })
        #expect(both.events.first?.id == stream.events[4].id)
        await both.close()

        // Bad positions and devices: a JSON error, with the request id, and no stream.
        let bad = try await open(stack, token: s.token, headers: ["Last-Event-ID": "yesterday", "X-Request-Id": "app-req-42"])
        #expect(bad.status == .badRequest)
        let error = try JSONParser.parse(Array(bad.errorBody.utf8))
        #expect(error["error"]?["code"] == "bad_request")
        #expect(error["error"]?["request_id"] == "app-req-42")
        #expect(bad.headers["x-request-id"].first == "app-req-42")
        let negative = try await open(stack, token: s.token, query: "?after_id=-1")
        #expect(negative.status == .unprocessableEntity)
        let stranger = try await open(stack, token: s.token, query: "?device_id=not-mine")
        #expect(stranger.status == .unprocessableEntity)
        let anonymous = try await EventStreamReader.open(url: "http://127.0.0.1:\(stack.apiPort)/dailyroundup/changes/stream")
        #expect(anonymous.status == .unauthorized)
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aStreamCutAndResumedUnderSteadyLoadSeesEveryChangeOnceInOrder(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let s = try await SyncSetup.make(stack, list: "Lload", board: "Bload")
        let total = 120
        // A steady load: a card every 25 ms while the stream is read, cut, and resumed three times.
        let load = Task {
            var cards: [String] = []
            for n in 0..<total {
                cards.append(stack.trello.userCreateCard(listID: "Lload", name: "Load \(n)"))
                try? await Task.sleep(for: .milliseconds(25))
            }
            return cards
        }
        var seen: [EventStreamReader.Event] = []
        var last: String?
        for cut in 0..<4 {
            let stream = try await open(stack, token: s.token, headers: last.map { ["Last-Event-ID": $0] } ?? [:])
            #expect(stream.status == .ok)
            if cut < 3 {
                _ = await TestSupport.eventually(timeout: .seconds(10)) { stream.events.count >= 10 }
                try await Task.sleep(for: .milliseconds(150))
            } else {
                let cards = await load.value
                await stack.trello.waitForWebhookDeliveries()
                #expect(cards.count == total)
                _ = await TestSupport.eventually(timeout: .seconds(30)) { seen.count + stream.events.count >= total }
                try await Task.sleep(for: .milliseconds(300))
            }
            await stream.close()
            seen += stream.events
            last = seen.last?.id ?? last
        }
        let ids = seen.compactMap { $0.id.flatMap { Int64($0) } }
        #expect(ids.count == total, "\(ids.count) events for \(total) cards")
        #expect(ids == ids.sorted() && Set(ids).count == ids.count, "in id order, none twice")
        let cards = seen.compactMap { try? JSONParser.parse(Array($0.data.utf8))["trello_card_id"]?.stringValue }
        #expect(Set(cards) == Set(await load.value))
        // The stream and the page agree.
        #expect(ids == (try await s.changes()).compactMap { $0["id"]?.numberValue.map { Int64($0) } })
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aChangeMadeThroughOneAPIProcessReachesAStreamOnAnother(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startWorker(name: "w1")
        // A heartbeat far beyond the test's wait: only the announcement can bring the change in time.
        let slow = ["ROUNDUP_STREAM_HEARTBEAT_SECONDS": "300"]
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: slow)
        let first = stack.apiPort
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: slow)
        let second = stack.apiPort
        #expect(first != second)
        let s = try await SyncSetup.make(stack, list: "Ltwo", board: "Btwo")
        let stream = try await open(stack, token: s.token, port: second)
        #expect(stream.status == .ok)
        try await Task.sleep(for: .milliseconds(300))
        let card = stack.trello.userCreateCard(listID: "Ltwo", name: "Across processes")
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { stream.events.count == 1 })
        #expect(changes(stream).first?["trello_card_id"] == .string(card))
        // The app acks through the first process; the second keeps streaming what comes next.
        let id = try #require(changes(stream).first?["id"]?.numberValue.map { Int($0) })
        #expect(try await stack.callAPI(.POST, "/dailyroundup/changes/\(id)/ack", token: s.token, port: first).status == .ok)
        let next = stack.trello.userCreateCard(listID: "Ltwo", name: "And another")
        #expect(await TestSupport.eventually(timeout: .seconds(10)) { stream.events.count == 2 })
        #expect(changes(stream).last?["trello_card_id"] == .string(next))
        await stream.close()
        await stack.shutdown()
    }

    @Test func streamsAreBoundedPerAccountAndHeartbeatsKeepThemAlive() async throws {
        let stack = try await Stack()
        defer { Task { await stack.shutdown() } }
        try await stack.startAPI(
            bootstrapToken: SyncSetup.bootstrap, extra: ["ROUNDUP_STREAMS_PER_ACCOUNT": "2", "ROUNDUP_STREAM_HEARTBEAT_SECONDS": "1"])
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: SyncSetup.bootstrap)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let a = try await open(stack, token: token)
        let b = try await open(stack, token: token)
        #expect(a.status == .ok && b.status == .ok)
        let c = try await open(stack, token: token)
        #expect(c.status == .tooManyRequests)
        #expect(try JSONParser.parse(Array(c.errorBody.utf8))["error"]?["code"] == "too_many_streams")
        #expect(c.headers["retry-after"].first != nil)
        // Another account is not held back by this one's streams.
        let other = try #require(try await stack.callAPI(.POST, "/dailyroundup/account", token: SyncSetup.bootstrap).json["auth_token"]?.stringValue)
        let d = try await open(stack, token: other)
        #expect(d.status == .ok)
        #expect(await TestSupport.eventually(timeout: .seconds(5)) { a.comments.contains("heartbeat") })
        #expect(a.events.isEmpty && !a.ended)
        // A closed stream frees its place.
        await b.close()
        #expect(
            await TestSupport.eventually(timeout: .seconds(5)) {
                let again = try? await open(stack, token: token)
                await again?.close()
                return again?.status == .ok
            })
        await a.close()
        await d.close()
        await stack.shutdown()
    }

    @Test func sigtermEndsOpenStreamsAndTheAPIExitsZero() async throws {
        let stack = try await Stack()
        defer { Task { await stack.shutdown() } }
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        let created = try await stack.callAPI(.POST, "/dailyroundup/account", token: SyncSetup.bootstrap)
        let token = try #require(created.json["auth_token"]?.stringValue)
        let streams = [try await open(stack, token: token), try await open(stack, token: token)]
        #expect(streams.allSatisfy { $0.status == .ok })
        let api = try #require(stack.api)
        let started = ContinuousClock.now
        api.signal(SIGTERM)
        #expect(await api.wait(timeout: .seconds(15)) == 0, "\(api.output)")
        #expect(ContinuousClock.now - started < .seconds(10), "streams must not hold the shutdown")
        #expect(await TestSupport.eventually(timeout: .seconds(5)) { streams.allSatisfy(\.ended) })
        for stream in streams { await stream.close() }
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func aDeviceThatHoldsAStreamGetsNoBackgroundPush(backend: StoreBackend) async throws {
        let stack = try await Stack(store: backend)
        // Heartbeats every second: the API notices the closed stream at its next one.
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: ["ROUNDUP_STREAM_HEARTBEAT_SECONDS": "1"])
        let apns = try await FakeAPNs.start()
        defer {
            Task {
                await stack.shutdown()
                await apns.stop()
            }
        }
        try await stack.startPusher(apns: apns, extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": "0"])
        let pushers = PusherTests()
        let (account, token) = try await pushers.account(stack, devices: [("mac", "production"), ("iphone", "production")])
        let stream = try await open(stack, token: token, query: "?device_id=mac")
        #expect(stream.status == .ok)
        #expect(
            try await TestSupport.eventually {
                try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.streamingDevices(account: account)), "mac").int == 1
            })
        try await pushers.push(stack, account: account, kind: "background")
        #expect(await TestSupport.eventually { apns.delivered.count == 1 })
        try await Task.sleep(for: .milliseconds(500))
        #expect(apns.delivered.map(\.deviceToken) == [PusherTests.deviceToken(1)], "only the iPhone, which holds no stream")
        // A change waits unacknowledged when the Mac's stream closes: the devices are woken once (the Mac may never
        // have received it), and afterwards the Mac is woken by pushes again.
        let store = try await stack.store()
        let list = try await store.createSyncList(accountID: account, name: "Inbox", trelloBoardID: "Bpush", trelloListID: "Lpush")
        _ = try await store.apply([
            CardObservation(
                accountID: account, syncListID: list.id, cardID: "Cwaiting", actionID: nil, actionDate: Date(),
                kind: .fields(["title": "Waiting"], full: true))
        ])
        await stream.close()
        #expect(await TestSupport.eventually { apns.delivered.count == 3 }, "a push to both devices after the stream closed")
        #expect(Set(apns.delivered.dropFirst().map(\.deviceToken)) == [PusherTests.deviceToken(0), PusherTests.deviceToken(1)])
        #expect(
            try await TestSupport.eventually {
                try await stack.redis.send("HEXISTS", RedisArgument(stack.keys.streamingDevices(account: account)), "mac").int == 0
            })
        try await pushers.push(stack, account: account, kind: "background")
        #expect(await TestSupport.eventually { apns.delivered.count == 5 })
        #expect(Set(apns.delivered.dropFirst(3).map(\.deviceToken)) == [PusherTests.deviceToken(0), PusherTests.deviceToken(1)])
        await stack.shutdown()
        await apns.stop()
    }
}
