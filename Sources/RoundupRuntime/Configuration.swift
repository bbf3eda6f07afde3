public import Foundation
public import Logging
public import RoundupCore
public import RoundupRedis

/// Every setting of every process, read from the environment in one place. docs/CONFIGURATION.md documents each key
/// (`ConfigurationReferenceTests` holds the two to the same keys).
public struct RoundupConfiguration: Sendable {
    public var redisURL: String
    /// `ROUNDUP_REDIS_CLUSTER=true`: `redisURL` names a Redis Cluster (several seed nodes may be listed).
    public var redisCluster: Bool
    public var redisPrefix: String
    public var redisCAFile: String?
    /// `ROUNDUP_REDIS_WAIT_REPLICAS`: replicas that must acknowledge an accepted webhook before the ingress answers 200
    /// (`auto`, the default: one whenever the primary has a replica; 0: never wait), within `redisWaitTimeoutMilliseconds`.
    public var redisWaitReplicas: RedisReplicaWait.Count
    public var redisWaitTimeoutMilliseconds: Int
    public var databaseURL: String
    public var publicURL: String?
    public var trelloAPIURL: String
    public var host: String
    public var ingressPort: Int
    public var workerPort: Int
    public var logLevel: Logger.Level
    public var logFormat: RoundupLogHandler.Format
    /// Seconds a process may take to finish in-flight work after SIGTERM.
    public var shutdownTimeoutSeconds: Int
    /// Seconds an accepted action id is remembered for deduplication.
    public var dedupeTTLSeconds: Int
    /// Deliveries of one event before it goes to the dead-letter stream.
    public var maxDeliveries: Int
    /// Milliseconds a pending entry may sit with a consumer before another worker reclaims it.
    public var claimIdleMilliseconds: Int
    /// Entries read per batch.
    public var workerBatchSize: Int
    /// A batch of several accounts is processed in this many lanes of whole accounts at once (1: one at a time).
    public var workerAccountLanes: Int
    /// A batch wanting this many cards of one list reads the list instead (`WebhookProcessor.fetchCards`).
    public var workerListReadMin: Int
    /// How long a batch's card read waits for its account's Trello rate limit before the entries needing it are left
    /// in the stream (`ROUNDUP_WORKER_TRELLO_WAIT_MS`).
    public var workerTrelloWaitMilliseconds: Int
    /// How long a sync job runs before it gives its turn back while other jobs wait (`ROUNDUP_JOB_TURN_SECONDS`).
    public var jobTurnSeconds: Int
    /// The consumer name of this worker in the group; defaults to host name and process id.
    public var workerConsumerName: String
    public var apiPort: Int
    /// The token that allows `POST /dailyroundup/account`; nil turns account creation off.
    public var bootstrapToken: String?
    /// The password of `roundupctl dashboard` (HTTP Basic); required when it listens beyond loopback.
    public var dashboardToken: String?
    /// The viewer's password of the dashboard: sees every page, changes nothing (needs `dashboardToken`).
    public var dashboardViewerToken: String?
    /// The path the dashboard is served under behind a proxy (`/ops/roundup`), or "" at the root.
    public var dashboardBasePath: String
    /// Requests per minute one account may make to the API.
    public var apiRateLimit: Int
    /// Failed bearer tokens and bootstrap attempts per client address per minute before the API answers 429 (0: off).
    public var authFailureLimit: Int
    /// Open change streams (`GET /dailyroundup/changes/stream`) one API process holds in all, and per account.
    public var maxStreams: Int
    public var maxStreamsPerAccount: Int
    /// Seconds between a change stream's heartbeats (a comment line that keeps proxies from closing it; each one
    /// also reads the store, so a lost announcement delays a change by this much at most).
    public var streamHeartbeatSeconds: Int
    /// A change stream ends after this many seconds whatever it does; its client reconnects from its last id.
    public var streamMaxSeconds: Int
    /// How long the changes a device pulls (or streams) with `device_id` are its own before another device of the
    /// account may have them (a queue's visibility timeout).
    public var changeClaimSeconds: Int
    /// Exports (`GET /dailyroundup/account/export`) one account runs at once on every API process together.
    public var exportsPerAccount: Int
    /// Devices one account may register.
    public var devicesPerAccount: Int
    /// The apps a device may register for (`bundle_id`): `ROUNDUP_APP_BUNDLE_IDS`, `ROUNDUP_APNS_TOPIC` and the topics
    /// of `ROUNDUP_APNS_APPS_FILE`.
    public var appBundleIDs: Set<BundleID>
    /// A running sync job whose heartbeat has not moved for this many seconds is reported as `error: stale`.
    public var jobStaleSeconds: Int
    /// How often a running job's heartbeat (`updated_at`) advances.
    public var jobHeartbeatSeconds: Int
    /// Sync jobs one worker runs at once (each belongs to a different account).
    public var jobConcurrency: Int
    /// The most Trello writes one `POST /dailyroundup/sync` may imply (its changes' cards, fields, check items and
    /// links); more is refused with 413, so no job holds a worker's slot for long. 0: no bound.
    public var syncMaxTrelloWrites: Int
    /// Trello requests per token, and per API key, in any 10-second window, shared by every process through Redis.
    public var trelloTokenLimit: Int
    public var trelloKeyLimit: Int
    /// Seconds a fingerprint of our own Trello write is kept, so its webhook echo is recognised.
    public var echoTTLSeconds: Int
    /// APNs (roundup-pusher): the .p8 key, its id, the team, the app's bundle id, the endpoints.
    public var apnsKeyFile: String?
    public var apnsKeyID: String?
    public var apnsTeamID: String?
    public var apnsTopic: String?
    /// More apps the pusher sends for, beside the one above (`ROUNDUP_APNS_APPS_FILE`).
    public var apnsApps: [APNsAppCredentials]
    public var apnsURL: String
    public var apnsSandboxURL: String
    public var apnsCAFile: String?
    public var apnsConnections: Int
    public var pusherPort: Int
    /// At most one background push per device in this window.
    public var pushWindowSeconds: Int
    /// What roundup-pusher does without its APNs credentials: exit 78 (`fail`, for systemd), or serve only its health
    /// and metrics, not ready, and send nothing (`idle`, for a pod whose other containers must run without them).
    public var pusherWithoutAPNs: PusherWithoutAPNs
    /// Every list is reconciled with Trello this often (0: never on a schedule; on demand still works).
    public var reconcileIntervalSeconds: Int
    /// The activity history keeps each row this many days (the worker deletes older ones every hour).
    public var activityRetentionDays: Int
    /// PostgreSQL: connections one process keeps at most, and the CA file for `sslmode=verify-full`.
    public var databasePoolSize: Int
    public var databaseCAFile: String?
    /// PostgreSQL: seconds one store operation may take, waiting for a connection included, before it fails (and is retried).
    public var databaseTimeoutSeconds: Int
    /// Connection hygiene of the ingress and the API (they face the internet without a proxy in front).
    public var httpLimits: HTTPLimits
    /// Webhook events waiting in the stream beyond which the ingress answers 503 (Trello retries later); 0: no bound.
    public var maxBacklog: Int
    /// One account's share of its webhook shard: events, bytes and rate (`ROUNDUP_WEBHOOK_ACCOUNT_*`), and the shard's bytes.
    public var webhookShares: WebhookShares
    /// Dead letters kept at most, and for at most this many days; older ones are trimmed (counted and logged).
    public var deadLetterMax: Int
    public var deadLetterMaxAgeDays: Int

    /// "" (the root), or slash-led segments of unreserved URL characters: safe in any link, form and header as it is.
    static func isBasePath(_ path: String) -> Bool {
        guard !path.isEmpty else { return true }
        guard path.hasPrefix("/"), path.utf8.count <= 200 else { return false }
        let segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false)
        return segments.allSatisfy { segment in
            !segment.isEmpty && segment != "." && segment != ".."
                && segment.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-_.~".unicodeScalars.contains($0)) }
        }
    }

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        func value(_ key: String) -> String? {
            guard let v = environment[key]?.trimmingCharacters(in: .whitespaces), !v.isEmpty else { return nil }
            return v
        }
        func integer(_ key: String, default def: Int, range: ClosedRange<Int>) throws -> Int {
            guard let text = value(key) else { return def }
            guard let n = Int(text), range.contains(n) else {
                throw ConfigurationError(key: key, problem: "must be a whole number in \(range.lowerBound)...\(range.upperBound), not \"\(text)\"")
            }
            return n
        }
        /// One of an enumeration's raw values, in any case.
        func choice<Choice: RawRepresentable<String>>(_ key: String, default def: Choice, problem: String) throws -> Choice {
            guard let text = value(key) else { return def }
            guard let parsed = Choice(rawValue: text.lowercased()) else { throw ConfigurationError(key: key, problem: problem) }
            return parsed
        }
        func url(_ key: String, default def: String?, schemes: Set<String>) throws -> String? {
            guard let text = value(key) ?? def else { return nil }
            guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
                schemes.contains(scheme), components.host?.isEmpty == false
            else {
                throw ConfigurationError(key: key, problem: "must be a URL with scheme \(schemes.sorted().joined(separator: " or ")) and a host")
            }
            return text.hasSuffix("/") ? String(text.dropLast()) : text
        }

        redisURL = value("ROUNDUP_REDIS_URL") ?? "redis://127.0.0.1:6379/0"
        switch value("ROUNDUP_REDIS_CLUSTER")?.lowercased() {
        case nil, "false", "no", "0": redisCluster = false
        case "true", "yes", "1": redisCluster = true
        case let other?: throw ConfigurationError(key: "ROUNDUP_REDIS_CLUSTER", problem: "must be true or false, not \"\(other)\"")
        }
        guard redisURL.hasPrefix("redis://") || redisURL.hasPrefix("rediss://") else {
            throw ConfigurationError(key: "ROUNDUP_REDIS_URL", problem: "must look like redis://[user:password@]host:port/db or rediss://…")
        }
        do {
            _ = try RedisConfiguration(url: redisURL, cluster: redisCluster)
        } catch let error as RedisClientError {
            throw ConfigurationError(key: "ROUNDUP_REDIS_URL", problem: error.message)
        }
        redisPrefix = value("ROUNDUP_REDIS_PREFIX") ?? "roundup:"
        guard RedisHashSlot.keepsHashTags(underPrefix: redisPrefix) else {
            throw ConfigurationError(key: "ROUNDUP_REDIS_PREFIX", problem: "must not contain { or }: they would change the keys' hash tags")
        }
        redisCAFile = value("ROUNDUP_REDIS_CA_FILE")
        switch value("ROUNDUP_REDIS_WAIT_REPLICAS")?.lowercased() {
        case nil, "auto": redisWaitReplicas = .auto
        case let text?:
            guard let count = Int(text), (0...16).contains(count) else {
                throw ConfigurationError(key: "ROUNDUP_REDIS_WAIT_REPLICAS", problem: "must be auto or a whole number in 0...16, not \"\(text)\"")
            }
            redisWaitReplicas = .exactly(count)
        }
        // Within the ingress's 800 ms for the enqueue, which Trello's retries count on.
        redisWaitTimeoutMilliseconds = try integer("ROUNDUP_REDIS_WAIT_TIMEOUT_MS", default: 250, range: 1...500)
        if let ca = redisCAFile, !FileManager.default.isReadableFile(atPath: ca) {
            throw ConfigurationError(key: "ROUNDUP_REDIS_CA_FILE", problem: "names a file that cannot be read: \(ca)")
        }
        databaseURL = value("ROUNDUP_DATABASE_URL") ?? "sqlite:data/roundup.sqlite"
        guard databaseURL.hasPrefix("sqlite:") || databaseURL.hasPrefix("postgres://") || databaseURL.hasPrefix("postgresql://") else {
            throw ConfigurationError(key: "ROUNDUP_DATABASE_URL", problem: "must start with sqlite: (a file path) or postgres://")
        }
        publicURL = try url("ROUNDUP_PUBLIC_URL", default: nil, schemes: ["http", "https"])
        trelloAPIURL = try url("ROUNDUP_TRELLO_API_URL", default: "https://api.trello.com/1", schemes: ["http", "https"])!
        host = value("ROUNDUP_HOST") ?? "127.0.0.1"
        ingressPort = try integer("ROUNDUP_INGRESS_PORT", default: 8081, range: 0...65535)
        workerPort = try integer("ROUNDUP_WORKER_PORT", default: 9101, range: 0...65535)
        logLevel = try choice("LOG_LEVEL", default: .info, problem: "must be one of trace, debug, info, notice, warning, error, critical")
        logFormat = try choice("LOG_FORMAT", default: .text, problem: "must be text or json")
        shutdownTimeoutSeconds = try integer("ROUNDUP_SHUTDOWN_TIMEOUT", default: 25, range: 1...3600)
        dedupeTTLSeconds = try integer("ROUNDUP_DEDUPE_TTL_SECONDS", default: 172_800, range: 60...2_592_000)
        maxDeliveries = try integer("ROUNDUP_MAX_DELIVERIES", default: 5, range: 1...1000)
        claimIdleMilliseconds = try integer("ROUNDUP_CLAIM_IDLE_MS", default: 30_000, range: 100...86_400_000)
        workerBatchSize = try integer("ROUNDUP_WORKER_BATCH", default: 256, range: 1...10_000)
        workerAccountLanes = try integer("ROUNDUP_WORKER_ACCOUNT_LANES", default: 2, range: 1...16)
        workerListReadMin = try integer("ROUNDUP_WORKER_LIST_READ_MIN", default: 10, range: 2...1000)
        workerTrelloWaitMilliseconds = try integer("ROUNDUP_WORKER_TRELLO_WAIT_MS", default: 1000, range: 0...600_000)
        workerConsumerName =
            value("ROUNDUP_WORKER_NAME")
            ?? "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)"
        apiPort = try integer("ROUNDUP_API_PORT", default: 8080, range: 0...65535)
        bootstrapToken = value("ROUNDUP_BOOTSTRAP_TOKEN")
        dashboardToken = value("ROUNDUP_DASHBOARD_TOKEN")
        if let token = dashboardToken, token.utf8.count < 16 {
            throw ConfigurationError(key: "ROUNDUP_DASHBOARD_TOKEN", problem: "is too short: use at least 16 random characters")
        }
        dashboardViewerToken = value("ROUNDUP_DASHBOARD_VIEWER_TOKEN")
        if let viewer = dashboardViewerToken {
            guard let operatorToken = dashboardToken else {
                throw ConfigurationError(
                    key: "ROUNDUP_DASHBOARD_VIEWER_TOKEN", problem: "needs ROUNDUP_DASHBOARD_TOKEN too (without it, anyone on loopback operates)")
            }
            guard viewer.utf8.count >= 16 else {
                throw ConfigurationError(key: "ROUNDUP_DASHBOARD_VIEWER_TOKEN", problem: "is too short: use at least 16 random characters")
            }
            guard !constantTimeEquals(Array(viewer.utf8), Array(operatorToken.utf8)) else {
                throw ConfigurationError(key: "ROUNDUP_DASHBOARD_VIEWER_TOKEN", problem: "must differ from ROUNDUP_DASHBOARD_TOKEN")
            }
        }
        dashboardBasePath = value("ROUNDUP_DASHBOARD_BASE_PATH").map { $0.hasSuffix("/") ? String($0.dropLast()) : $0 } ?? ""
        guard Self.isBasePath(dashboardBasePath) else {
            throw ConfigurationError(
                key: "ROUNDUP_DASHBOARD_BASE_PATH",
                problem: "must be a path like /ops/roundup: a slash, then letters, digits, '-', '_', '.' and '~' in segments of one slash each")
        }
        if let token = bootstrapToken, token.utf8.count < 16 {
            throw ConfigurationError(key: "ROUNDUP_BOOTSTRAP_TOKEN", problem: "is too short: use at least 16 random characters")
        }
        apiRateLimit = try integer("ROUNDUP_API_RATE_LIMIT", default: 600, range: 1...1_000_000)
        authFailureLimit = try integer("ROUNDUP_AUTH_FAILURE_LIMIT", default: 30, range: 0...1_000_000)
        maxStreams = try integer("ROUNDUP_STREAMS_MAX", default: 2000, range: 0...1_000_000)
        maxStreamsPerAccount = try integer("ROUNDUP_STREAMS_PER_ACCOUNT", default: 10, range: 1...10_000)
        streamHeartbeatSeconds = try integer("ROUNDUP_STREAM_HEARTBEAT_SECONDS", default: 15, range: 1...300)
        streamMaxSeconds = try integer("ROUNDUP_STREAM_MAX_SECONDS", default: 3600, range: 10...86_400)
        changeClaimSeconds = try integer("ROUNDUP_CHANGE_CLAIM_SECONDS", default: 120, range: 1...86_400)
        exportsPerAccount = try integer("ROUNDUP_EXPORTS_PER_ACCOUNT", default: 2, range: 1...100)
        devicesPerAccount = try integer("ROUNDUP_DEVICES_PER_ACCOUNT", default: 20, range: 1...10_000)
        jobStaleSeconds = try integer("ROUNDUP_JOB_STALE_SECONDS", default: 60, range: 2...86_400)
        jobHeartbeatSeconds = try integer("ROUNDUP_JOB_HEARTBEAT_SECONDS", default: 5, range: 1...10)
        guard jobHeartbeatSeconds * 2 <= jobStaleSeconds else {
            throw ConfigurationError(
                key: "ROUNDUP_JOB_HEARTBEAT_SECONDS", problem: "must be at most half of ROUNDUP_JOB_STALE_SECONDS, or live jobs would read as stale")
        }
        jobConcurrency = try integer("ROUNDUP_JOB_CONCURRENCY", default: 4, range: 1...256)
        jobTurnSeconds = try integer("ROUNDUP_JOB_TURN_SECONDS", default: 10, range: 1...86_400)
        syncMaxTrelloWrites = try integer("ROUNDUP_SYNC_MAX_TRELLO_WRITES", default: 2000, range: 0...10_000_000)
        trelloTokenLimit = try integer("ROUNDUP_TRELLO_TOKEN_LIMIT", default: 100, range: 1...100_000)
        trelloKeyLimit = try integer("ROUNDUP_TRELLO_KEY_LIMIT", default: 300, range: 1...100_000)
        echoTTLSeconds = try integer("ROUNDUP_ECHO_TTL_SECONDS", default: 120, range: 5...86_400)
        apnsKeyFile = value("ROUNDUP_APNS_KEY_FILE")
        apnsKeyID = value("ROUNDUP_APNS_KEY_ID")
        apnsTeamID = value("ROUNDUP_APNS_TEAM_ID")
        apnsTopic = value("ROUNDUP_APNS_TOPIC")
        if let file = value("ROUNDUP_APNS_APPS_FILE") {
            apnsApps = try APNsAppCredentials.load(file: file, defaultTopic: value("ROUNDUP_APNS_TOPIC"))
        } else {
            apnsApps = []
        }
        var bundleIDs = Set(apnsApps.map(\.topic))
        if let topic = apnsTopic {
            guard let id = BundleID(rawValue: topic) else { throw ConfigurationError(key: "ROUNDUP_APNS_TOPIC", problem: "is not a bundle id") }
            bundleIDs.insert(id)
        }
        for text in (value("ROUNDUP_APP_BUNDLE_IDS") ?? "").split(separator: ",") {
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            guard !trimmed.isEmpty else { continue }
            guard let id = BundleID(rawValue: trimmed) else {
                throw ConfigurationError(key: "ROUNDUP_APP_BUNDLE_IDS", problem: "names \(trimmed), which is not a bundle id (reverse DNS)")
            }
            bundleIDs.insert(id)
        }
        appBundleIDs = bundleIDs
        apnsURL = try url("ROUNDUP_APNS_URL", default: "https://api.push.apple.com", schemes: ["https"])!
        apnsSandboxURL = try url("ROUNDUP_APNS_SANDBOX_URL", default: "https://api.sandbox.push.apple.com", schemes: ["https"])!
        apnsCAFile = value("ROUNDUP_APNS_CA_FILE")
        if let ca = apnsCAFile, !FileManager.default.isReadableFile(atPath: ca) {
            throw ConfigurationError(key: "ROUNDUP_APNS_CA_FILE", problem: "names a file that cannot be read: \(ca)")
        }
        apnsConnections = try integer("ROUNDUP_APNS_CONNECTIONS", default: 2, range: 1...64)
        pusherPort = try integer("ROUNDUP_PUSHER_PORT", default: 9102, range: 0...65535)
        pushWindowSeconds = try integer("ROUNDUP_PUSH_WINDOW_SECONDS", default: 30, range: 0...3600)
        pusherWithoutAPNs = try choice("ROUNDUP_PUSHER_WITHOUT_APNS", default: .fail, problem: "must be fail or idle")
        reconcileIntervalSeconds = try integer("ROUNDUP_RECONCILE_INTERVAL_SECONDS", default: 900, range: 0...604_800)
        activityRetentionDays = try integer("ROUNDUP_ACTIVITY_RETENTION_DAYS", default: 30, range: 1...3650)
        databasePoolSize = try integer("ROUNDUP_DATABASE_POOL_SIZE", default: 10, range: 1...500)
        databaseCAFile = value("ROUNDUP_DATABASE_CA_FILE")
        databaseTimeoutSeconds = try integer("ROUNDUP_DATABASE_TIMEOUT_SECONDS", default: 30, range: 1...3600)
        httpLimits = HTTPLimits(
            headTimeoutSeconds: try integer("ROUNDUP_HTTP_HEAD_TIMEOUT_SECONDS", default: 10, range: 1...600),
            bodyTimeoutSeconds: try integer("ROUNDUP_HTTP_BODY_TIMEOUT_SECONDS", default: 30, range: 1...3600),
            idleTimeoutSeconds: try integer("ROUNDUP_HTTP_IDLE_TIMEOUT_SECONDS", default: 60, range: 1...3600),
            maxHeaderBytes: try integer("ROUNDUP_HTTP_MAX_HEADER_BYTES", default: 16_384, range: 1024...1_048_576),
            maxConnections: try integer("ROUNDUP_HTTP_MAX_CONNECTIONS", default: 4096, range: 1...1_000_000),
            writeTimeoutSeconds: try integer("ROUNDUP_HTTP_WRITE_TIMEOUT_SECONDS", default: 30, range: 1...3600))
        maxBacklog = try integer("ROUNDUP_MAX_BACKLOG", default: 100_000, range: 0...100_000_000)
        webhookShares = WebhookShares(
            accountEvents: try integer("ROUNDUP_WEBHOOK_ACCOUNT_BACKLOG", default: WebhookShares.standard.accountEvents, range: 0...100_000_000),
            accountBytes: try integer("ROUNDUP_WEBHOOK_ACCOUNT_BYTES", default: WebhookShares.standard.accountBytes, range: 0...(1 << 40)),
            shardBytes: try integer("ROUNDUP_WEBHOOK_SHARD_BYTES", default: WebhookShares.standard.shardBytes, range: 0...(1 << 40)),
            accountRate: try integer("ROUNDUP_WEBHOOK_ACCOUNT_RATE", default: WebhookShares.standard.accountRate, range: 0...1_000_000))
        deadLetterMax = try integer("ROUNDUP_DEAD_LETTER_MAX", default: 10_000, range: 1...10_000_000)
        deadLetterMaxAgeDays = try integer("ROUNDUP_DEAD_LETTER_MAX_AGE_DAYS", default: 180, range: 1...3650)
        if let ca = databaseCAFile, !FileManager.default.isReadableFile(atPath: ca) {
            throw ConfigurationError(key: "ROUNDUP_DATABASE_CA_FILE", problem: "names a file that cannot be read: \(ca)")
        }
        if sqlitePath == nil {
            _ = try PostgresURL(databaseURL)
        }
    }

    /// The SQLite file path, when the database URL names one.
    public var sqlitePath: String? {
        databaseURL.hasPrefix("sqlite:") ? String(databaseURL.dropFirst("sqlite:".count)) : nil
    }

    /// The PostgreSQL settings, when the database URL names a server.
    public var postgresURL: PostgresURL? { sqlitePath == nil ? try? PostgresURL(databaseURL) : nil }

    /// The APNs settings roundup-pusher cannot start without that are not set.
    public var missingAPNsKeys: [String] {
        [
            ("ROUNDUP_APNS_KEY_FILE", apnsKeyFile), ("ROUNDUP_APNS_KEY_ID", apnsKeyID), ("ROUNDUP_APNS_TEAM_ID", apnsTeamID),
            ("ROUNDUP_APNS_TOPIC", apnsTopic),
        ]
        .filter { $0.1 == nil }.map(\.0)
    }
}

extension RoundupConfiguration {
    /// Reads the configuration or exits with a message naming the bad key.
    public static func loadOrExit() -> RoundupConfiguration {
        do {
            return try RoundupConfiguration()
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            exit(78)  // EX_CONFIG
        }
    }
}

/// `ROUNDUP_PUSHER_WITHOUT_APNS`.
public enum PusherWithoutAPNs: String, Sendable {
    case fail, idle
}

/// An app the pusher sends for besides the default one: its bundle id (the topic) and its team's signing key.
public struct APNsAppCredentials: Sendable, Equatable {
    public var topic: BundleID
    public var teamID: String
    public var keyID: String
    public var keyFile: String

    public init(topic: BundleID, teamID: String, keyID: String, keyFile: String) {
        self.topic = topic
        self.teamID = teamID
        self.keyID = keyID
        self.keyFile = keyFile
    }

    /// `ROUNDUP_APNS_APPS_FILE`: a JSON array of `{"topic", "team_id", "key_id", "key_file"}`, one per app, each topic
    /// once and none the default app's (`ROUNDUP_APNS_TOPIC`).
    static func load(file: String, defaultTopic: String?) throws -> [APNsAppCredentials] {
        func problem(_ text: String) -> ConfigurationError { ConfigurationError(key: "ROUNDUP_APNS_APPS_FILE", problem: text) }
        guard let data = FileManager.default.contents(atPath: file) else { throw problem("names a file that cannot be read: \(file)") }
        guard let items = (try? JSONParser.parse(Array(data)))?.arrayValue else {
            throw problem("must hold a JSON array of {\"topic\", \"team_id\", \"key_id\", \"key_file\"}")
        }
        var apps: [APNsAppCredentials] = []
        for (index, item) in items.enumerated() {
            func field(_ name: String) throws -> String {
                guard let text = item[name]?.stringValue, !text.isEmpty else { throw problem("app \(index + 1) has no \(name)") }
                return text
            }
            guard let topic = BundleID(rawValue: try field("topic")) else { throw problem("app \(index + 1): topic is not a bundle id") }
            guard !apps.contains(where: { $0.topic == topic }), topic.rawValue != defaultTopic else {
                throw problem("names the topic \(topic) twice (ROUNDUP_APNS_TOPIC included)")
            }
            let keyFile = try field("key_file")
            guard FileManager.default.isReadableFile(atPath: keyFile) else { throw problem("app \(topic): key_file cannot be read: \(keyFile)") }
            apps.append(APNsAppCredentials(topic: topic, teamID: try field("team_id"), keyID: try field("key_id"), keyFile: keyFile))
        }
        return apps
    }
}

/// How much of its webhook shard one account may hold, so an account flooding its own signed deliveries (it knows its
/// webhook secret) is refused while the other accounts of its shard are not. 0 in any bound: none.
public struct WebhookShares: Sendable, Equatable {
    /// Events of one account waiting in its shard (accepted, not yet processed).
    public var accountEvents: Int
    /// Bytes of those events' bodies (each at most 1 MiB).
    public var accountBytes: Int
    /// Bytes of all events waiting in one shard, every account's.
    public var shardBytes: Int
    /// Events one account may add a second, sustained; bursts up to `accountEvents` (a token bucket).
    public var accountRate: Int

    public init(accountEvents: Int, accountBytes: Int, shardBytes: Int, accountRate: Int) {
        self.accountEvents = accountEvents
        self.accountBytes = accountBytes
        self.shardBytes = shardBytes
        self.accountRate = accountRate
    }

    /// The defaults: 500 events and 16 MiB an account, 64 MiB a shard, 50 events a second.
    public static let standard = WebhookShares(accountEvents: 500, accountBytes: 16 << 20, shardBytes: 64 << 20, accountRate: 50)
    public static let unbounded = WebhookShares(accountEvents: 0, accountBytes: 0, shardBytes: 0, accountRate: 0)
}
