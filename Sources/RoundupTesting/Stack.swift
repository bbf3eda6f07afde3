public import AsyncHTTPClient
public import Foundation
import NIOCore
public import NIOHTTP1
public import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStore
public import RoundupStreams

/// The real executables over loopback, for end-to-end tests and benchmarks: a Redis (shared via
/// `ROUNDUP_TEST_REDIS_URL` with a prefix of its own, or a private redis-server), a fake Trello,
/// a new store of the back end asked for, `roundup-ingress` and any number of `roundup-worker` processes.
public final class Stack: @unchecked Sendable {
    // @unchecked: processes are started and stopped from the one test task that owns the stack.
    public let redisURL: String
    /// Whether `redisURL` names a Redis Cluster (`ROUNDUP_REDIS_CLUSTER=true` for every process).
    public let redisCluster: Bool
    public let privateRedis: RedisServer?
    public let prefix: String
    public let keys: RedisKeys
    public let redis: RedisClient
    public let trello: FakeTrello
    public let directory: URL
    /// The store's back end.
    public let backend: StoreBackend
    /// The SQLite file when the back end is SQLite.
    public let databasePath: String
    /// `ROUNDUP_DATABASE_URL` of every process of this stack: that file, or a database of its own on the test server.
    public let databaseURL: String
    private var openedStore: (any ServerStore)?
    /// Trello calls the ingress at this URL: the real ingress on loopback, so the fake Trello's HEAD check reaches it.
    public var publicURL: String { "http://127.0.0.1:\(ingressPort)" }
    /// Created last in `init`, so a failed set-up never drops a client that was not shut down.
    public let http: HTTPClient
    public private(set) var ingress: ManagedProcess?
    public let ingressPort: Int
    public private(set) var api: ManagedProcess?
    public private(set) var apiPort = 0
    /// Every API process started, with its port (`apiPort` is the latest).
    public private(set) var apis: [(process: ManagedProcess, port: Int)] = []
    public private(set) var workers: [ManagedProcess] = []
    /// Each worker's /healthz and /metrics port, by worker name.
    public private(set) var workerPorts: [String: Int] = [:]

    /// A stack on a new store of `backend` (SQLite for a test that is not about the store). `redisArguments` (e.g.
    /// AOF settings) imply a private redis-server; `cluster` puts the stack on that Redis Cluster instead.
    public init(
        store backend: StoreBackend = .sqlite, privateRedis wantsPrivate: Bool = false, redisArguments: [String] = [], cluster: RedisCluster? = nil
    ) async throws {
        self.backend = backend
        directory = try TestSupport.temporaryDirectory("stack")
        databasePath = directory.appendingPathComponent("roundup.sqlite").path
        databaseURL = try await TestStore.makeURL(backend, in: directory)
        ingressPort = try TestSupport.freePort()
        prefix = "t\(UUID().uuidString.prefix(8).lowercased()):"
        keys = RedisKeys(prefix: prefix)
        let env = ProcessInfo.processInfo.environment
        // `ROUNDUP_TEST_STACK_ON_CLUSTER=1`: every stack that would share the test Redis shares the test cluster
        // (`ROUNDUP_TEST_REDIS_CLUSTER_URL`, which scripts/test starts) instead.
        let sharedCluster =
            env["ROUNDUP_TEST_STACK_ON_CLUSTER"] == "1" && !wantsPrivate && redisArguments.isEmpty
            ? env["ROUNDUP_TEST_REDIS_CLUSTER_URL"].flatMap { $0.isEmpty ? nil : $0 } : nil
        redisCluster = cluster != nil || sharedCluster != nil
        if let cluster {
            redisURL = cluster.url
            privateRedis = nil
        } else if let sharedCluster {
            redisURL = sharedCluster
            privateRedis = nil
        } else if !wantsPrivate, redisArguments.isEmpty, let shared = ProcessInfo.processInfo.environment["ROUNDUP_TEST_REDIS_URL"], !shared.isEmpty {
            redisURL = shared
            privateRedis = nil
        } else {
            let server = try await RedisServer(extraArguments: redisArguments)
            privateRedis = server
            redisURL = server.url
        }
        redis = RedisClient(configuration: try RedisConfiguration(url: redisURL, cluster: redisCluster))
        trello = try await FakeTrello.start()
        http = HTTPClient(eventLoopGroupProvider: .singleton)
    }

    public var environment: [String: String] {
        [
            "ROUNDUP_REDIS_URL": redisURL, "ROUNDUP_REDIS_CLUSTER": redisCluster ? "true" : "false", "ROUNDUP_REDIS_PREFIX": prefix,
            "ROUNDUP_DATABASE_URL": databaseURL,
            "ROUNDUP_PUBLIC_URL": publicURL, "ROUNDUP_TRELLO_API_URL": trello.baseURL, "ROUNDUP_HOST": "127.0.0.1",
            "LOG_LEVEL": "info",
        ]
    }

    /// Starts one of the server's executables with the stack's environment, `settings` and `extra` over it, and waits
    /// (up to 20 s) for its `/healthz` on `port` to answer 200.
    func launch(
        _ executable: String, name: String, port: Int, settings: [String: String], extra: [String: String], started: (ManagedProcess) -> Void
    ) async throws -> ManagedProcess {
        let env = environment.merging(settings) { $1 }.merging(extra) { $1 }
        let process = try ManagedProcess(
            name: name, executable: TestSupport.binDirectory.appendingPathComponent(executable), environment: env, logDirectory: directory)
        started(process)
        let up = await TestSupport.eventually(timeout: .seconds(20)) { (try? await self.get(port: port, "/healthz").status) == .ok }
        guard up else { throw StackError("\(name) did not come up: \(process.output)") }
        return process
    }

    public func startIngress(extra: [String: String] = [:]) async throws {
        _ = try await launch(
            "roundup-ingress", name: "ingress-\(ingressPort)", port: ingressPort, settings: ["ROUNDUP_INGRESS_PORT": String(ingressPort)],
            extra: extra
        ) { ingress = $0 }
    }

    /// Starts a roundup-api on `port` (one that a stopped API used, say), else on a free one; `apiPort` names it.
    public func startAPI(bootstrapToken: String?, extra: [String: String] = [:], port: Int? = nil) async throws {
        let port = try port ?? TestSupport.freePort()
        apiPort = port
        var settings = ["ROUNDUP_API_PORT": String(port)]
        if let bootstrapToken { settings["ROUNDUP_BOOTSTRAP_TOKEN"] = bootstrapToken }
        _ = try await launch("roundup-api", name: "api-\(port)", port: port, settings: settings, extra: extra) { process in
            api = process
            apis.append((process, port))
        }
    }

    /// A request to roundup-api; `body` is sent as JSON unless `contentType` says otherwise.
    public func callAPI(
        _ method: HTTPMethod, _ path: String, token: String?, body: String? = nil, contentType: String? = "application/json",
        headers extra: [String: String] = [:], port: Int? = nil
    ) async throws -> Response {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port ?? apiPort)\(path)")
        request.method = method
        if let token { request.headers.add(name: "authorization", value: "Bearer \(token)") }
        if let body {
            if let contentType { request.headers.add(name: "content-type", value: contentType) }
            request.body = .bytes(ByteBuffer(string: body))
        }
        for (k, v) in extra { request.headers.add(name: k, value: v) }
        let response = try await http.execute(request, timeout: .seconds(20))
        let text = try await response.body.collect(upTo: 4 << 20)
        return Response(status: response.status, body: String(buffer: text))
    }

    @discardableResult
    public func startWorker(name: String, extra: [String: String] = [:]) async throws -> ManagedProcess {
        let port = try TestSupport.freePort()
        return try await launch(
            "roundup-worker", name: "worker-\(name)", port: port,
            settings: ["ROUNDUP_WORKER_PORT": String(port), "ROUNDUP_WORKER_NAME": name], extra: extra
        ) { process in
            workers.append(process)
            workerPorts[name] = port
        }
    }

    public private(set) var pushers: [ManagedProcess] = []
    /// Each pusher's /healthz and /metrics port, by name.
    public private(set) var pusherPorts: [String: Int] = [:]

    /// Starts `roundup-pusher` against a fake APNs (both production and sandbox URLs point at it).
    @discardableResult
    public func startPusher(apns: FakeAPNs, name: String = "p1", extra: [String: String] = [:]) async throws -> ManagedProcess {
        let port = try TestSupport.freePort()
        let settings = [
            "ROUNDUP_PUSHER_PORT": String(port), "ROUNDUP_WORKER_NAME": name, "ROUNDUP_APNS_KEY_FILE": apns.keyFile,
            "ROUNDUP_APNS_KEY_ID": apns.keyID, "ROUNDUP_APNS_TEAM_ID": apns.teamID, "ROUNDUP_APNS_TOPIC": apns.topic,
            "ROUNDUP_APNS_URL": apns.url, "ROUNDUP_APNS_SANDBOX_URL": apns.url, "ROUNDUP_APNS_CA_FILE": apns.caFile,
        ]
        return try await launch("roundup-pusher", name: "pusher-\(name)", port: port, settings: settings, extra: extra) { process in
            pushers.append(process)
            pusherPorts[name] = port
        }
    }

    public struct Response: Sendable {
        public var status: HTTPResponseStatus
        public var body: String

        /// The body parsed as JSON (`.null` when it is not JSON).
        public var json: JSONValue { (try? JSONParser.parse(Array(body.utf8))) ?? .null }
    }

    public func get(_ path: String) async throws -> Response {
        try await request(.GET, path, body: nil, headers: [:])
    }

    /// GET from any local port (a worker's /metrics, say).
    public func get(port: Int, _ path: String) async throws -> Response {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
        request.method = .GET
        let response = try await http.execute(request, timeout: .seconds(10))
        return Response(status: response.status, body: String(buffer: try await response.body.collect(upTo: 4 << 20)))
    }

    /// Every log line the stack's processes wrote.
    public var allLogs: String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return files.filter { $0.hasSuffix(".log") }.compactMap {
            try? String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8)
        }.joined(separator: "\n")
    }

    /// POSTs a body to the ingress, signed for `secret` (nil: unsigned).
    /// The account's own webhook path, callback token and all, as the API and reconciliation register it; the token
    /// is published for the ingress (as the API does when it pairs a list), so tests that seed the store directly
    /// can post to it too.
    public func webhookPath(account: String) async throws -> String {
        guard let token = try await store().account(id: account)?.webhookToken else { throw StackError("account \(account) has no callback token") }
        _ = try await redis.send("HSET", RedisArgument(keys.webhookTokens), RedisArgument(account), RedisArgument(token))
        return WebhookCallback.path(account: account, token: token)
    }

    public func postWebhook(path: String, body: [UInt8], secret: String?, signatureOverride: String? = nil) async throws -> Response {
        var headers: [String: String] = ["content-type": "application/json"]
        if let signatureOverride {
            headers["x-trello-webhook"] = signatureOverride
        } else if let secret {
            headers["x-trello-webhook"] = TrelloSignature.sign(secret: secret, body: body, callbackURL: publicURL + path)
        }
        return try await request(.POST, path, body: body, headers: headers)
    }

    public func request(_ method: HTTPMethod, _ path: String, body: [UInt8]?, headers: [String: String]) async throws -> Response {
        var request = HTTPClientRequest(url: "http://127.0.0.1:\(ingressPort)\(path)")
        request.method = method
        for (k, v) in headers { request.headers.add(name: k, value: v) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await http.execute(request, timeout: .seconds(10))
        let text = try await response.body.collect(upTo: 1 << 20)
        return Response(status: response.status, body: String(buffer: text))
    }

    public func streamLength() async throws -> Int {
        try await redis.length(of: .webhooks, keys: keys)
    }

    private var isShutDown = false

    /// A test that throws before calling `shutdown()` still releases its HTTP client (AsyncHTTPClient traps
    /// on a client dropped while running); the processes are killed by their own deinit.
    deinit {
        if !isShutDown { try? http.syncShutdown() }
    }

    /// On a cluster, a command that named keys of several slots was refused (`CROSSSLOT`): its log lines are appended
    /// to `ROUNDUP_TEST_CROSSSLOT_LOG`, which scripts/test fails on after its pass on the cluster (a suite that was not
    /// written for the cluster need not look itself).
    func reportCrossSlot() {
        let lines = allLogs.split(separator: "\n").filter { $0.contains("CROSSSLOT") }
        guard !lines.isEmpty, let path = ProcessInfo.processInfo.environment["ROUNDUP_TEST_CROSSSLOT_LOG"], !path.isEmpty else { return }
        let text = lines.map { "\(directory.lastPathComponent): \($0)\n" }.joined()
        if let handle = FileHandle(forWritingAtPath: path)
            ?? (FileManager.default.createFile(atPath: path, contents: nil) ? FileHandle(forWritingAtPath: path) : nil)
        {
            handle.seekToEndOfFile()
            handle.write(Data(text.utf8))
            try? handle.close()
        }
    }

    /// The stack's store, opened (and migrated) once, as its processes see it.
    public func store() async throws -> any ServerStore {
        if let openedStore { return openedStore }
        let store = try await TestStore.open(url: databaseURL)
        openedStore = store
        return store
    }

    public func shutdown() async {
        isShutDown = true
        if redisCluster { reportCrossSlot() }
        if let openedStore { await TestStore.close(openedStore) }
        for worker in workers { await worker.stop() }
        for pusher in pushers { await pusher.stop() }
        if let ingress { await ingress.stop() }
        for (process, _) in apis { await process.stop() }
        await trello.stop()
        try? await http.shutdown()
        await redis.shutdown()
        if let privateRedis { await privateRedis.stop() }
    }
}

public struct StackError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Webhook bodies shaped like Trello's, for tests and benchmarks.
public enum WebhookBodies {
    /// A list-model webhook body for a card action, padded with a realistic board/list/member payload.
    public static func body(
        type: String, actionID: String, cardID: String, listID: String, boardID: String,
        card extra: [String: JSONValue] = [:], old: [String: JSONValue]? = nil, date: String = "2026-11-22T10:00:00.000Z",
        padding: Int = 0
    ) -> [UInt8] {
        var card: [String: JSONValue] = [
            "id": .string(cardID), "name": .string("Card \(cardID)"), "idShort": .number(7), "shortLink": .string("aBcD1234"),
        ]
        for (k, v) in extra { card[k] = v }
        var data: [String: JSONValue] = [
            "card": .object(card), "list": .object(["id": .string(listID), "name": .string("Groceries")]),
            "board": .object(["id": .string(boardID), "name": .string("Home"), "shortLink": .string("SCPjg8ON")]),
        ]
        if let old { data["old"] = .object(old) }
        let action: [String: JSONValue] = [
            "id": .string(actionID), "idMemberCreator": .string("5a5b5c5d5e5f606162636465"), "type": .string(type),
            "date": .string(date), "data": .object(data),
            "memberCreator": .object([
                "id": .string("5a5b5c5d5e5f606162636465"), "fullName": .string("Ada Lovelace"), "username": .string("ada"),
                "avatarHash": .string(String(repeating: "f", count: 32)), "initials": .string("AL"),
            ]),
            "display": .object([
                "translationKey": .string("action_changed_description_of_card"), "entities": .string(String(repeating: "x", count: padding)),
            ]),
        ]
        let model: [String: JSONValue] = [
            "id": .string(listID), "name": .string("Groceries"), "closed": .bool(false), "idBoard": .string(boardID), "pos": .number(65535),
        ]
        return Array(JSONValue.object(["action": .object(action), "model": .object(model)]).canonicalJSON.utf8)
    }
}
