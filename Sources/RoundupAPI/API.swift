import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupRedis
import RoundupRouting
import RoundupStore
import RoundupSync
import RoundupTrello

/// roundup-api's logic: the routes the apps call, over a store, Redis and the Trello client.
public struct API: Sendable {
    public struct Options: Sendable {
        public var publicURL: String
        public var bootstrapToken: String?
        public var keys: RedisKeys
        public var rateLimitPerMinute: Int
        /// A running job whose heartbeat has not moved for this long reads as `error: stale`.
        public var staleAfter: TimeInterval
        /// Failed bearer tokens and bootstrap attempts per client address per minute before 429 (0: no throttle);
        /// `ROUNDUP_AUTH_FAILURE_LIMIT`.
        public var authFailureLimit: Int

        public init(
            publicURL: String, bootstrapToken: String?, keys: RedisKeys, rateLimitPerMinute: Int, staleAfter: TimeInterval = 60,
            authFailureLimit: Int = 30
        ) {
            self.authFailureLimit = authFailureLimit
            self.staleAfter = staleAfter
            self.publicURL = publicURL
            self.bootstrapToken = bootstrapToken
            self.keys = keys
            self.rateLimitPerMinute = rateLimitPerMinute
        }
    }

    let options: Options
    let store: any OutboundStore
    let redis: RedisClient
    let trello: TrelloClient
    /// Applies conflict and duplicate resolutions to Trello.
    let engine: SyncEngine
    let logger: Logger
    let metricsText: @Sendable () -> String
    /// Failed authentication per client address (`AuthThrottle`).
    let throttle: AuthThrottle

    public init(
        options: Options, store: any OutboundStore, redis: RedisClient, trello: TrelloClient, engine: SyncEngine, logger: Logger,
        metricsText: @escaping @Sendable () -> String = { "" }
    ) {
        self.engine = engine
        self.options = options
        self.store = store
        self.redis = redis
        self.trello = trello
        self.logger = logger
        self.metricsText = metricsText
        self.throttle = AuthThrottle(limit: options.authFailureLimit, redis: redis, keys: options.keys, logger: logger)
    }

    /// Every route, as (method, path template); the OpenAPI test compares this with docs/openapi.yaml.
    public static let routes: [(HTTPRequest.Method, String)] = [
        (.get, "/healthz"), (.get, "/readyz"), (.get, "/metrics"),
        (.post, "/dailyroundup/account"), (.get, "/dailyroundup/account"), (.put, "/dailyroundup/account"),
        (.delete, "/dailyroundup/account"), (.post, "/dailyroundup/account/token"),
        (.get, "/dailyroundup/lists"), (.post, "/dailyroundup/lists"), (.get, "/dailyroundup/lists/{id}"),
        (.delete, "/dailyroundup/lists/{id}"),
        (.get, "/dailyroundup/changes"), (.post, "/dailyroundup/changes/{id}/ack"), (.post, "/dailyroundup/changes/ack"),
        (.get, "/dailyroundup/devices"), (.post, "/dailyroundup/devices"), (.delete, "/dailyroundup/devices/{device_id}"),
        (.get, "/dailyroundup/conflicts"), (.get, "/dailyroundup/duplicates"),
        (.post, "/dailyroundup/sync"), (.get, "/dailyroundup/sync/jobs/{job_id}"), (.post, "/dailyroundup/lists/{id}/import"),
        (.post, "/dailyroundup/conflicts/{id}/resolve"), (.post, "/dailyroundup/duplicates/{id}/resolve"),
        (.post, "/dailyroundup/lists/{id}/reconcile"),
    ]

    /// "METHOD /path" for each route.
    public static var routeNames: [String] { routes.map { "\($0.0.rawValue) \($0.1)" } }

    public func router() -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        // Every request's lines carry Hummingbird's request id (`hb.request.id`); headers are never logged.
        router.add(middleware: LogRequestsMiddleware(.debug))
        router.add(middleware: ErrorMiddleware(logger: logger))
        router.add(middleware: MetricsMiddleware())
        for (method, path) in Self.routes {
            router.on(RouterPath(path), method: method) { request, context in
                try await self.handle(method, path, request, context)
            }
        }
        return router
    }

    func handle(_ method: HTTPRequest.Method, _ path: String, _ request: Request, _ context: APIRequestContext) async throws -> Response {
        switch (method, path) {
        case (.get, "/healthz"): return jsonResponse(.ok, .object(["status": "ok"]))
        case (.get, "/readyz"): return try await ready()
        case (.get, "/metrics"):
            return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4"], body: ResponseBody(byteBuffer: ByteBuffer(string: metricsText())))
        case (.post, "/dailyroundup/account"): return try await createAccount(request, context)
        default: break
        }
        let account = try await authenticate(request, context)
        switch (method, path) {
        case (.get, "/dailyroundup/account"): return try await getAccount(account)
        case (.put, "/dailyroundup/account"): return try await updateAccount(account, request, context)
        case (.delete, "/dailyroundup/account"): return try await deleteAccount(account)
        case (.post, "/dailyroundup/account/token"): return try await rotateToken(account)
        case (.get, "/dailyroundup/lists"): return try await listLists(account)
        case (.post, "/dailyroundup/lists"): return try await createList(account, request, context)
        case (.get, "/dailyroundup/lists/{id}"): return try await getList(account, try context.parameters.require("id"))
        case (.delete, "/dailyroundup/lists/{id}"): return try await deleteList(account, try context.parameters.require("id"))
        case (.get, "/dailyroundup/changes"): return try await listChanges(account, request)
        case (.post, "/dailyroundup/changes/{id}/ack"): return try await ackOne(account, try context.parameters.require("id"), request, context)
        case (.post, "/dailyroundup/changes/ack"): return try await ackMany(account, request, context)
        case (.get, "/dailyroundup/devices"): return try await listDevices(account)
        case (.post, "/dailyroundup/devices"): return try await registerDevice(account, request, context)
        case (.delete, "/dailyroundup/devices/{device_id}"): return try await deleteDevice(account, try context.parameters.require("device_id"))
        case (.get, "/dailyroundup/conflicts"): return try await listConflicts(account)
        case (.get, "/dailyroundup/duplicates"): return try await listDuplicates(account)
        case (.post, "/dailyroundup/sync"): return try await submitSync(account, request, context)
        case (.get, "/dailyroundup/sync/jobs/{job_id}"): return try await getJob(account, try context.parameters.require("job_id"))
        case (.post, "/dailyroundup/lists/{id}/import"): return try await importList(account, try context.parameters.require("id"))
        case (.post, "/dailyroundup/lists/{id}/reconcile"): return try await reconcileList(account, try context.parameters.require("id"))
        case (.post, "/dailyroundup/conflicts/{id}/resolve"): return try await resolveConflict(account, try context.parameters.require("id"), request, context)
        case (.post, "/dailyroundup/duplicates/{id}/resolve"): return try await resolveDuplicate(account, try context.parameters.require("id"), request, context)
        default: throw APIError.notFound("no such path")
        }
    }

    // MARK: Authentication and rate limits

    /// The account whose token the request carries; tokens are looked up by their SHA-256 only. An address over its
    /// budget of failed tokens is answered 429 before its token costs a store query (`AuthThrottle`).
    func authenticate(_ request: Request, _ context: APIRequestContext) async throws -> String {
        guard let token = Self.bearerToken(request) else { throw APIError.unauthorized("send Authorization: Bearer <token>") }
        let tokenHash = Self.hash(token)
        let attempt = AuthThrottle.Attempt(.token, request: request, context: context, tokenHash: tokenHash)
        let invalid = APIError.unauthorized("the token is not valid (rotated, deleted, or never issued)")
        try await throttle.check(attempt, unauthorized: invalid)
        Counter(label: "roundup_api_token_lookups_total").increment()
        guard let account = try await store.accountID(tokenHash: tokenHash) else {
            await throttle.record(.token, attempt)
            throw invalid
        }
        try await checkRate(account)
        return account
    }

    static func bearerToken(_ request: Request) -> String? {
        guard let header = request.headers[.authorization] else { return nil }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }

    static func hash(_ token: String) -> String {
        SHA256.hash(data: Array(token.utf8)).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }

    /// A fixed one-minute window per account, counted in Redis so every API process shares it.
    /// When Redis cannot be reached the request is let through (and logged): the API does not fail on a limiter.
    func checkRate(_ account: String) async throws {
        let key = Self.rateKey(options.keys, account: account, minute: Self.currentMinute())
        let replies: [RedisValue]
        do {
            replies = try await redis.pipeline([RedisCommand("INCR", [RedisArgument(key)]), RedisCommand("EXPIRE", [RedisArgument(key), 120])], timeout: .milliseconds(500))
        } catch {
            logger.warning("rate limiter unavailable", metadata: ["error": "\(error)"])
            return
        }
        if let count = replies.first?.int, count > options.rateLimitPerMinute {
            let retry = 60 - Int(Date().timeIntervalSince1970) % 60
            throw APIError(.tooManyRequests, "rate_limited", "more than \(options.rateLimitPerMinute) requests this minute; retry in \(retry) s", headers: [.retryAfter: String(retry)])
        }
    }

    static func currentMinute() -> Int { Int(Date().timeIntervalSince1970 / 60) }

    /// The account's request count of one minute (it expires two minutes later).
    static func rateKey(_ keys: RedisKeys, account: String, minute: Int) -> String {
        keys.prefix + "ratelimit:" + account + ":" + String(minute)
    }

    static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let base64 = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return "rt_" + base64
    }

    func ready() async throws -> Response {
        do {
            try await store.ping()
        } catch {
            throw APIError.unavailable("the store is not reachable")
        }
        do {
            _ = try await redis.send(RedisCommand("PING"), timeout: .milliseconds(1000))
        } catch {
            throw APIError.unavailable("Redis is not reachable")
        }
        return jsonResponse(.ok, .object(["status": "ready"]))
    }
}

/// Turns every error into the JSON envelope; unknown routes become 404, or 405 where the path exists.
struct ErrorMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            throw error
        } catch let error as HTTPError {
            switch error.status {
            case .notFound:
                let allowed = API.routes.filter { Self.matches(template: $0.1, path: request.uri.path) }.map(\.0.rawValue)
                if !allowed.isEmpty {
                    throw APIError(.methodNotAllowed, "method_not_allowed", "\(request.method.rawValue) is not allowed here; use \(allowed.joined(separator: ", "))",
                                   headers: [.allow: allowed.joined(separator: ", ")])
                }
                throw APIError.notFound("no such path")
            case .contentTooLarge: throw APIError(.contentTooLarge, "payload_too_large", "the body is over 1 MiB")
            case .badRequest: throw APIError.badRequest(error.body ?? "bad request")
            default: throw APIError(error.status, "http_\(error.status.code)", error.body ?? error.status.reasonPhrase)
            }
        } catch {
            // A bug or an outage, never bad input: log it whole, tell the client little.
            context.logger.error("request failed", metadata: ["path": "\(request.uri.path)", "error": "\(error)"])
            throw APIError(.internalServerError, "internal", "the server failed; it is logged")
        }
    }

    static func matches(template: String, path: String) -> Bool {
        let t = template.split(separator: "/")
        let p = path.split(separator: "/")
        guard t.count == p.count else { return false }
        return zip(t, p).allSatisfy { $0.first == "{" || $0 == $1 }
    }
}
