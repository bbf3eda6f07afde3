import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import NIOHTTP1
import PostgresNIO
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import RoundupTrello

@testable import RoundupAPI

/// roundup-api's router inside the test process (`app.test(.router)`): no socket and no child process, over a new
/// store of the back end given (`TestStore`; SQLite for a test that is not about the store), the test Redis under a prefix of its own (`ROUNDUP_TEST_REDIS_URL`,
/// or a private redis-server) and a fake Trello. For what the API decides; what crosses processes stays end-to-end.
/// Without a socket every request comes from the same client address ("local" for the authentication throttle).
struct InProcessAPI: Sendable {
    let client: any TestClientProtocol
    let store: any ServerStore
    let redis: RedisClient
    let keys: RedisKeys
    let trello: FakeTrello
    /// "METHOD /path" of every route the router has.
    let routeNames: [String]
    /// The API itself (what it keeps in memory, for the tests of that).
    let api: API
    /// The test's own redis-server, when `run` was asked for one (`privateRedis`): a test may stop it.
    let redisServer: RedisServer?
    /// Runs `body` against another API over the same store, Redis and fake Trello: a second process, as far as
    /// what each keeps in memory goes.
    let sibling: @Sendable (@Sendable (InProcessAPI) async throws -> Void) async throws -> Void

    /// A response as the tests read it.
    struct Response: Sendable {
        var status: HTTPResponseStatus
        var headers: HTTPFields
        var body: String
        /// The body parsed as JSON (`.null` when it is not JSON).
        var json: JSONValue { (try? JSONParser.parse(Array(body.utf8))) ?? .null }
        var contentType: String? { headers[.contentType] }
    }

    /// Builds the API as `roundup-api` does from its environment, runs `body` against its router, then tears down.
    static func run<Value: Sendable>(
        store backend: StoreBackend = .sqlite, bootstrapToken: String?, environment extra: [String: String] = [:], privateRedis wanted: Bool = false,
        _ body: @Sendable (InProcessAPI) async throws -> Value
    ) async throws -> Value {
        let (store, databaseURL) = try await TestStore.make(backend, "api")
        var privateRedis: RedisServer?
        let redisURL: String
        if !wanted, let shared = ProcessInfo.processInfo.environment["ROUNDUP_TEST_REDIS_URL"], !shared.isEmpty {
            redisURL = shared
        } else {
            let server = try await RedisServer()
            privateRedis = server
            redisURL = server.url
        }
        let trello = try await FakeTrello.start()
        var environment = [
            "ROUNDUP_REDIS_URL": redisURL, "ROUNDUP_REDIS_PREFIX": "t\(UUID().uuidString.prefix(8).lowercased()):",
            "ROUNDUP_DATABASE_URL": databaseURL, "ROUNDUP_PUBLIC_URL": "http://127.0.0.1:9", "ROUNDUP_TRELLO_API_URL": trello.baseURL,
            "ROUNDUP_HOST": "127.0.0.1",
        ]
        if let bootstrapToken { environment["ROUNDUP_BOOTSTRAP_TOKEN"] = bootstrapToken }
        for (key, value) in extra { environment[key] = value }
        let configuration = try RoundupConfiguration(environment: environment)
        var logger = Logger(label: "roundup.api.test")
        logger.logLevel = .warning
        let redis = try RedisClient.make(configuration: configuration, logger: logger)
        let http = HTTPClient(eventLoopGroupProvider: .singleton)
        let trelloClient = TrelloClient.make(configuration: configuration, http: http, redis: redis, logger: logger)
        let engine = SyncEngine(
            options: .init(
                keys: configuration.redisKeys, staleAfter: TimeInterval(configuration.jobStaleSeconds),
                heartbeat: .seconds(configuration.jobHeartbeatSeconds)),
            store: store, trello: trelloClient,
            echo: EchoFingerprints(redis: redis, keys: configuration.redisKeys, ttlSeconds: configuration.echoTTLSeconds), redis: redis,
            logger: logger)
        let apiLogger = logger
        let makeAPI: @Sendable () -> API = {
            API(
                options: .init(configuration: configuration, publicURL: configuration.publicURL ?? ""),
                store: store, redis: redis, trello: trelloClient, engine: engine, logger: apiLogger, metricsText: { "" })
        }
        let server = privateRedis
        @Sendable func serve<T: Sendable>(_ api: API, _ body: @Sendable (InProcessAPI) async throws -> T) async throws -> T {
            try await Application(router: api.router(), logger: apiLogger).test(.router) { client in
                try await body(
                    InProcessAPI(
                        client: client, store: store, redis: redis, keys: configuration.redisKeys, trello: trello, routeNames: api.routeNames,
                        api: api, redisServer: server, sibling: { other in try await serve(makeAPI(), other) }))
            }
        }
        let result: Result<Value, any Error>
        do {
            result = .success(try await serve(makeAPI(), body))
        } catch {
            result = .failure(error)
        }
        await TestStore.close(store)
        try? await http.shutdown()
        await redis.shutdown()
        await trello.stop()
        if let privateRedis { await privateRedis.stop() }
        return try result.get()
    }

    /// A request as it is: raw body bytes and the headers given (no content type added).
    func send(_ method: HTTPMethod, _ path: String, headers: HTTPFields = [:], body: [UInt8]? = nil) async throws -> Response {
        guard let method = HTTPRequest.Method(method.rawValue) else { throw StackError("no method \(method.rawValue)") }
        let response = try await client.execute(uri: path, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) })
        return Response(
            status: HTTPResponseStatus(statusCode: Int(response.status.code)), headers: response.headers, body: String(buffer: response.body))
    }

    /// A request as `Stack.callAPI` sends it: `body` as JSON unless `contentType` says otherwise.
    func call(
        _ method: HTTPMethod, _ path: String, token: String?, body: String? = nil, contentType: String? = "application/json",
        headers extra: [String: String] = [:]
    ) async throws -> Response {
        var headers = HTTPFields()
        if let token { headers[.authorization] = "Bearer \(token)" }
        if body != nil, let contentType { headers[.contentType] = contentType }
        for (name, value) in extra {
            guard let field = HTTPField.Name(name) else { throw StackError("bad header name \(name)") }
            headers.append(HTTPField(name: field, value: value))
        }
        return try await send(method, path, headers: headers, body: body.map { Array($0.utf8) })
    }

    /// A new account made with the bootstrap token.
    func createAccount(bootstrap: String) async throws -> (account: String, token: String) {
        let created = try await call(.POST, "/dailyroundup/account", token: bootstrap)
        guard created.status == .created, let account = created.json["account_id"]?.stringValue, let token = created.json["auth_token"]?.stringValue
        else {
            throw StackError("account not created: \(created.status) \(created.body)")
        }
        return (account, token)
    }
}
