public import Foundation
public import Hummingbird
public import Logging
public import RoundupCore
public import RoundupJobs
public import RoundupRedis
public import RoundupRuntime
import RoundupStore
public import RoundupStreams
public import RoundupTrello

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
        /// Open change streams and their heartbeat.
        public var streams: ChangeStreams.Limits
        /// Exports one account runs at once, on every API process together (`ROUNDUP_EXPORTS_PER_ACCOUNT`).
        public var exportsPerAccount: Int
        /// Devices one account may register (`ROUNDUP_DEVICES_PER_ACCOUNT`).
        public var devicesPerAccount: Int
        /// The apps a device may register for (`RoundupConfiguration.appBundleIDs`).
        public var bundleIDs: Set<BundleID>
        /// The most Trello writes one sync may imply (`ROUNDUP_SYNC_MAX_TRELLO_WRITES`); 0: no bound.
        public var syncMaxTrelloWrites = 2000
        /// How long the changes a device pulls are its own (`ROUNDUP_CHANGE_CLAIM_SECONDS`).
        public var changeClaimSeconds: TimeInterval = 120

        public init(
            publicURL: String, bootstrapToken: String?, keys: RedisKeys, rateLimitPerMinute: Int, staleAfter: TimeInterval = 60,
            authFailureLimit: Int = 30, streams: ChangeStreams.Limits = .init(), exportsPerAccount: Int = 2, devicesPerAccount: Int = 20,
            bundleIDs: Set<BundleID> = []
        ) {
            self.exportsPerAccount = exportsPerAccount
            self.devicesPerAccount = devicesPerAccount
            self.bundleIDs = bundleIDs
            self.streams = streams
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
    /// In front of every route that acts for an account.
    let authentication: AuthenticationMiddleware
    /// The open change streams; a service the process runs (`APIApplication`).
    public let streams: ChangeStreams
    /// Where jobs are submitted and queued for the workers.
    let jobs: JobQueue
    /// What accounts hold open across API processes (streams, exports); a service the process runs.
    public let leases: AccountLeases
    /// Webhooks at Trello: made with a list, removed with it or its account.
    let webhooks: WebhookRegistrar
    /// A list paired whole or not at all.
    let pairing: ListPairing

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
        self.jobs = JobQueue(store: store, redis: redis, keys: options.keys, staleAfter: options.staleAfter)
        let webhooks = WebhookRegistrar(
            store: store, trello: trello, callbacks: WebhookCallbacks(publicURL: options.publicURL, redis: redis, keys: options.keys), logger: logger)
        self.webhooks = webhooks
        self.pairing = ListPairing(webhooks: webhooks)
        let throttle = AuthThrottle(limit: options.authFailureLimit, redis: redis, keys: options.keys, logger: logger)
        self.throttle = throttle
        let leases = AccountLeases(redis: redis, keys: options.keys, logger: logger, lifetime: max(.seconds(3), options.streams.heartbeat * 3))
        self.leases = leases
        self.streams = ChangeStreams(limits: options.streams, redis: redis, keys: options.keys, leases: leases, logger: logger)
        self.authentication = AuthenticationMiddleware(
            store: store, throttle: throttle,
            rateLimit: RateLimit(perMinute: options.rateLimitPerMinute, redis: redis, keys: options.keys, logger: logger),
            tokens: TokenCache(redis: redis, keys: options.keys, logger: logger))
    }

    /// The router: request ids, request logs, errors as the JSON envelope, request metrics, then one route collection per resource.
    public func router() -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        // Every request's lines carry its `X-Request-Id` (`request_id`); headers are never logged.
        router.add(middleware: RequestIDMiddleware())
        router.add(middleware: LogRequestsMiddleware(.debug))
        router.add(middleware: ErrorMiddleware(allowed: AllowedMethods(routes: routes)))
        router.add(middleware: MetricsMiddleware())
        addRoutes(to: router)
        return router
    }

    /// Every route collection, each given what it uses (and no more): the server's composition root.
    func addRoutes(to router: Router<APIRequestContext>) {
        let keys = options.keys
        let jobAnswers = JobAnswers(queue: jobs, logger: logger)
        let signals = AccountSignals(streams: streams, tokens: authentication.tokens, redis: redis, keys: keys)
        let account = AccountRoutes(
            store: store, bootstrapToken: options.bootstrapToken, exportsPerAccount: options.exportsPerAccount, leases: leases,
            throttle: throttle, signals: signals, webhooks: webhooks, purge: AccountPurge(redis: redis, keys: keys, logger: logger), logger: logger)
        router.addRoutes(HealthRoutes(store: store, redis: redis, metricsText: metricsText).collection)
        router.addRoutes(account.bootstrap, atPath: "/dailyroundup/account")
        let app = authenticatedRoutes(router, at: "/dailyroundup")
        app.addRoutes(account.collection, atPath: "account")
        app.addRoutes(
            ListRoutes(store: store, pairing: pairing, jobs: jobAnswers, logger: logger).collection, atPath: "lists")
        app.addRoutes(
            ChangeRoutes(store: store, signals: signals, claimFor: options.changeClaimSeconds, logger: logger).collection,
            atPath: "changes")
        app.addRoutes(
            DeviceRoutes(devices: store, bundleIDs: options.bundleIDs, devicesPerAccount: options.devicesPerAccount).collection,
            atPath: "devices")
        app.addRoutes(ConflictRoutes(store: store, engine: engine).collection, atPath: "conflicts")
        app.addRoutes(DuplicateRoutes(store: store, engine: engine).collection, atPath: "duplicates")
        app.addRoutes(
            SyncRoutes(store: store, jobs: jobAnswers, maxTrelloWrites: options.syncMaxTrelloWrites).collection, atPath: "sync")
        app.addRoutes(ActivityRoutes(activity: store).collection, atPath: "activity")
    }

    /// The one place a group of `AuthenticatedContext` routes is made: behind `AuthenticationMiddleware`, whose
    /// account the context carries (not optional).
    func authenticatedRoutes(_ router: Router<APIRequestContext>, at path: RouterPath) -> RouterGroup<AuthenticatedContext> {
        router.group(path).add(middleware: authentication).group(context: AuthenticatedContext.self)
    }

    /// Every route as Hummingbird registers it (path templates with `{parameter}`).
    public var routes: [Router<APIRequestContext>.RouteDescription] {
        let router = Router(context: APIRequestContext.self)
        addRoutes(to: router)
        return router.routes
    }

    /// "METHOD /path" for each route; the OpenAPI test compares them with docs/openapi.yaml.
    public var routeNames: [String] { routes.map { "\($0.method.rawValue) \($0.path.description)" } }
}

extension API.Options {
    /// The options `roundup-api` runs with, from its configuration.
    public init(configuration: RoundupConfiguration, publicURL: String) {
        self.init(
            publicURL: publicURL, bootstrapToken: configuration.bootstrapToken, keys: configuration.redisKeys,
            rateLimitPerMinute: configuration.apiRateLimit, staleAfter: TimeInterval(configuration.jobStaleSeconds),
            authFailureLimit: configuration.authFailureLimit,
            streams: .init(
                maxStreams: configuration.maxStreams, maxPerAccount: configuration.maxStreamsPerAccount,
                heartbeat: .seconds(configuration.streamHeartbeatSeconds), maxLifetime: .seconds(configuration.streamMaxSeconds)),
            exportsPerAccount: configuration.exportsPerAccount, devicesPerAccount: configuration.devicesPerAccount,
            bundleIDs: configuration.appBundleIDs)
        syncMaxTrelloWrites = configuration.syncMaxTrelloWrites
        changeClaimSeconds = TimeInterval(configuration.changeClaimSeconds)
    }
}
