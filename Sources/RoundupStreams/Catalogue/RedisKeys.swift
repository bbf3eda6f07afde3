import RoundupCore
public import RoundupRuntime

/// Every Redis key the server uses, under one prefix (`ROUNDUP_REDIS_PREFIX`), laid out for Redis Cluster's slots: keys
/// a script or a multi-key command touches together share a hash tag (`{…}`), so they share a slot (docs/SCALING.md):
/// - a webhook shard's stream, dead letters, errors and dedupe marks: `{whNN}` (`WebhookShard`);
/// - the routing tables (secrets, callback tokens, versions, routes, their epoch): `{routing}`;
/// - the authentication throttle of client addresses, and the tokens the store accepted lately that it lets through:
///   `{auth}` (asked only for a token an API process has not kept: a token's first request there in 30 s, and guesses);
/// - the job stream and its dead letters `{jobs}`, the push stream and its dead letters `{push}`;
/// - an account's own keys (echo fingerprints, open streams and exports, recent pushes, its request counts and token
///   epoch, which every request with a kept token checks in one script): `{a:<account>}`, so the API's requests spread
///   over the cluster's primaries with their accounts;
/// - Trello's rate windows: `{trello:<key digest>}`, the windows of the tokens used with that API key included.
/// The same layout serves a standalone Redis, where tags change nothing.
public struct RedisKeys: Sendable {
    public let prefix: String

    public init(prefix: String) { self.prefix = prefix }

    /// The stream the ingress appends a shard's webhook events to.
    public func webhookStream(_ shard: WebhookShard) -> String { prefix + "stream:webhooks:" + shard.tag }
    /// A shard's events that failed too often, with their last error.
    public func deadLetterStream(_ shard: WebhookShard) -> String { webhookStream(shard) + ":dead" }
    /// The last error of each entry of a shard's stream still being retried (field = entry id).
    public func webhookErrors(_ shard: WebhookShard) -> String { webhookStream(shard) + ":errors" }
    /// What each account has waiting in a shard (`StreamLoad`: `n:<account>` events, `b:<account>` bytes, `bytes` the
    /// shard's, `r:<account>` its rate bucket), raised by the ingress and lowered by the workers.
    public func webhookLoad(_ shard: WebhookShard) -> String { webhookStream(shard) + ":load" }
    /// The single webhook stream (its dead letters, its errors) of the versions before shards: drained, then removed
    /// (`LegacyKeys`).
    public var legacyWebhookStream: String { prefix + "stream:webhooks" }
    /// The consumer group the workers share.
    public var workerGroup: String { "workers" }
    /// Hash: account id → Trello webhook secret (the ingress cannot open the database).
    public var webhookSecrets: String { prefix + "{routing}:webhook-secrets" }
    /// Hash: account id → its webhook callback token (see `WebhookCallback`).
    public var webhookTokens: String { prefix + "{routing}:webhook-tokens" }
    /// The counter publishers take their versions from (see `RoutingWrites`).
    public var routingEpoch: String { prefix + "{routing}:epoch" }
    /// Hash: an account's published items → the version that last wrote each; `deleted` once the account is gone (a
    /// tombstone kept for a day: the ingress answers 410 to deliveries for it, so Trello deletes the webhook).
    public func routingVersions(account: String) -> String { prefix + "{routing}:versions:" + account }
    /// Set of the account ids watching a Trello model (list or board).
    public func modelRoute(_ modelID: String) -> String { prefix + "{routing}:route:" + modelID }
    /// Marks an action already accepted for an account, so redeliveries are not enqueued twice; in the slot of the
    /// account's webhook shard, so the mark and the entry are written (and kept or lost in a failover) together. The
    /// action id is hashed, so every such key has one size whatever a client sends.
    public func seenAction(account: String, action: String) -> String {
        seenAction(account: account, shard: WebhookShard(account: account), action: action)
    }
    /// The same, for a caller that knows the account's shard already (the ingress, per webhook).
    public func seenAction(account: String, shard: WebhookShard, action: String) -> String {
        prefix + "seen:" + shard.tag + ":" + account + ":" + Hex.sha256Prefix128(action)
    }
    /// What every dedupe mark of an account starts with (one slot: its shard's).
    public func seenPrefix(account: String) -> String { prefix + "seen:" + WebhookShard(account: account).tag + ":" + account + ":" }

    /// Sync and import jobs for the workers (consumer group `workerGroup`).
    public var jobStream: String { prefix + "stream:{jobs}" }
    /// Job entries that are no job message (`SyncJobMessage`): dead-lettered as they are read, kept for an operator. A
    /// job that fails ends with its error in the store, not here.
    public var jobDeadLetters: String { prefix + "stream:{jobs}:dead" }
    /// A set of `account<TAB>board` whose synced lists a worker reconciles at its next tick (a board label renamed,
    /// recoloured or deleted changes every card carrying it, and its action names no card).
    public var reconcileRequests: String { prefix + "reconcile:requested" }
    /// Pushes for roundup-pusher: conflicts (alert) and new changes (background).
    public var pushStream: String { prefix + "stream:{push}" }
    /// A fingerprint of a field value this server wrote to a card, so the webhook that echoes it is not taken for an edit.
    public func echo(account: String, card: String, field: String, hash: String) -> String {
        echoPrefix(account: account) + card + ":" + field + ":" + hash
    }
    /// A card this server is creating in a list, known by its title until Trello tells its id.
    public func echoCreate(account: String, syncList: String, titleHash: String) -> String {
        echoPrefix(account: account) + "new:" + syncList + ":" + titleHash
    }
    /// What every echo fingerprint of an account starts with (one slot: the account's).
    public func echoPrefix(account: String) -> String { prefix + "echo:" + Self.accountTag(account) + ":" }
    /// Sliding-window request logs for Trello's rate limits (keyed by a hash of the token or key, never the secret).
    /// They share the tag of the API key they are used with (`apiKeyDigest`), as the gate checks both windows at once.
    public func trelloWindow(_ hashedCredential: String, apiKeyDigest: String) -> String {
        prefix + "trello:{trello:" + apiKeyDigest + "}:window:" + hashedCredential
    }
    /// Set while Trello has told us to back off for a token.
    public func trelloPause(_ hashedCredential: String, apiKeyDigest: String) -> String {
        prefix + "trello:{trello:" + apiKeyDigest + "}:pause:" + hashedCredential
    }
    /// `ChangeAnnouncement`s: an account has new pending changes (every API process follows it for its open change
    /// streams; no consumer group).
    public var changeAnnouncements: String { prefix + "stream:changes" }
    /// Hash: the devices of an account that hold an open change stream → until when (ms since 1970), renewed at each
    /// heartbeat; roundup-pusher sends them no background push. The key expires with its last stream.
    public func streamingDevices(account: String) -> String { prefix + "streams:" + Self.accountTag(account) }
    /// Sorted set: what an account holds open on every API process (`kind`: its change streams, its exports), members
    /// scored by when they expire unless renewed (`AccountLeases` in RoundupAPI).
    public func accountLeases(account: String, kind: String) -> String { prefix + "leases:" + Self.accountTag(account) + ":" + kind }
    /// A bearer token the store accepted lately (by a prefix of its SHA-256), so the authentication throttle of an
    /// address that also sends bad tokens refuses guesses only, never a token that works (`AuthThrottle`). Expires a
    /// day after the token was last found.
    public func acceptedToken(_ tokenHash: String) -> String { prefix + "{auth}:ok:" + tokenHash.prefix(32) }
    /// Hash: the streams an operator paused (`roundupctl pause`) → since when (ms since 1970). Workers and pushers read
    /// nothing new from a paused stream (`PauseWatcher`).
    public var pausedStreams: String { prefix + "paused" }
    /// Push entries that are no push request (`PushRequest`): dead-lettered as they are read, kept for an operator.
    public var pushDeadLetters: String { prefix + "stream:{push}:dead" }
    /// The consumer group of roundup-pusher on the push stream.
    public var pusherGroup: String { "pushers" }
    /// Set while a device had a background push within the window.
    public func recentPush(account: String, device: String) -> String { prefix + "push:recent:" + Self.accountTag(account) + ":" + device }
    /// Set by the worker that wakes the devices of the holds that lapsed in window `index` (`HoldLapseWaker`): one
    /// worker a window. Expires after a few windows.
    public func holdLapseWindow(_ index: Int64) -> String { prefix + "holds:lapsed:" + String(index) }
    /// Sorted set of "account|device" waiting for the end of their window (score: when, in ms).
    public var deferredPushes: String { prefix + "push:deferred" }
    /// Set: the distinct bearer or bootstrap tokens (hash prefixes) that failed from one client address (IPv4, or an
    /// IPv6 /64) in the current fixed window; it expires with the window (`ROUNDUP_AUTH_FAILURE_LIMIT`).
    public func authFailures(address: String) -> String { prefix + "{auth}:fail:" + address }
    /// An account's token epoch: advanced before and after every revocation of its token, so an API process looks a
    /// token it kept up again (`TokenCache` in RoundupAPI). In the account's slot: the rate limit's script reads it with
    /// the account's request count.
    public func authEpoch(account: String) -> String { prefix + "auth:" + Self.accountTag(account) + ":epoch" }
    /// An account's requests in one minute (`RateLimit`), counted by the same script.
    public func requestCount(account: String, minute: Int) -> String {
        prefix + "auth:" + Self.accountTag(account) + ":ratelimit:" + String(minute)
    }
    /// The token epoch's earlier name (all of them in `{auth}`), which API processes of before still read
    /// during a rolling upgrade: a revocation advances it too where it exists (`TokenCache.revoke`), so none of them keeps trusting a
    /// revoked token. It expires by itself (an hour after its last advance); drop it once no such process runs.
    public func legacyAuthEpoch(account: String) -> String { prefix + "{auth}:epoch:" + account }

    /// The hash tag of an account's own keys.
    static func accountTag(_ account: String) -> String { "{a:" + account + "}" }
}

/// One of the fixed number of logical shards of the webhook stream (`count`, set once: changing it is an offline
/// migration, docs/SCALING.md). An account's events all go to one shard, chosen by a stable hash of its id, so they are
/// read in the order they were accepted; the shards spread over a cluster's primaries.
public struct WebhookShard: Sendable, Hashable, Comparable, CustomStringConvertible {
    public static let count = 64
    public static let all = (0..<count).map(WebhookShard.init(index:))

    public let index: Int

    public init(index: Int) {
        precondition((0..<Self.count).contains(index), "a webhook shard is in 0..<\(Self.count)")
        self.index = index
    }

    /// The account's shard: FNV-1a (64 bits) of its id, modulo `count` — the same in every process and release.
    public init(account: String) {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in account.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x100_0000_01b3
        }
        self.index = Int(hash % UInt64(Self.count))
    }

    /// `{whNN}`: the hash tag its keys share.
    public var tag: String { Self.tags[index] }
    private static let tags = (0..<count).map { $0 < 10 ? "{wh0\($0)}" : "{wh\($0)}" }
    public var description: String { String(index) }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.index < rhs.index }
}

extension RoundupConfiguration {
    /// The keys under `ROUNDUP_REDIS_PREFIX`.
    public var redisKeys: RedisKeys { RedisKeys(prefix: redisPrefix) }
}
