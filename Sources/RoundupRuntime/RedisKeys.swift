import RoundupCore

/// Every Redis key the server uses, under one prefix (`ROUNDUP_REDIS_PREFIX`).
public struct RedisKeys: Sendable {
    public let prefix: String

    public init(prefix: String) { self.prefix = prefix }

    /// The stream the ingress appends webhook events to.
    public var webhookStream: String { prefix + "stream:webhooks" }
    /// Events that failed too often, with their last error.
    public var deadLetterStream: String { prefix + "stream:webhooks:dead" }
    /// The last error of each stream entry still being retried (field = entry id).
    public var webhookErrors: String { prefix + "stream:webhooks:errors" }
    /// The consumer group the workers share.
    public var workerGroup: String { "workers" }
    /// Hash: account id → Trello webhook secret (the ingress cannot open the database).
    public var webhookSecrets: String { prefix + "webhook-secrets" }
    /// Hash: account id → its webhook callback token (see `WebhookCallback`).
    public var webhookTokens: String { prefix + "webhook-tokens" }
    /// The counter publishers take their versions from (see `RoutingWrites`).
    public var routingEpoch: String { prefix + "routing:epoch" }
    /// Hash: an account's published items → the version that last wrote each; `deleted` once the account is gone (a
    /// tombstone kept for a day: the ingress answers 410 to deliveries for it, so Trello deletes the webhook).
    public func routingVersions(account: String) -> String { prefix + "routing:versions:" + account }
    /// Set of the account ids watching a Trello model (list or board).
    public func modelRoute(_ modelID: String) -> String { prefix + "route:" + modelID }
    /// Marks an action already accepted for an account, so redeliveries are not enqueued twice. The action id is
    /// hashed, so every such key has one size whatever a client sends.
    public func seenAction(account: String, action: String) -> String {
        prefix + "seen:" + account + ":" + Hex.sha256Prefix128(action)
    }

    /// Sync and import jobs for the workers (consumer group `workerGroup`).
    public var jobStream: String { prefix + "stream:jobs" }
    /// Job entries that are no job message (`SyncJobMessage`): dead-lettered as they are read, kept for an operator. A
    /// job that fails ends with its error in the store, not here.
    public var jobDeadLetters: String { prefix + "stream:jobs:dead" }
    /// A set of `account<TAB>board` whose synced lists a worker reconciles at its next tick (a board label renamed,
    /// recoloured or deleted changes every card carrying it, and its action names no card).
    public var reconcileRequests: String { prefix + "reconcile:requested" }
    /// Pushes for roundup-pusher: conflicts (alert) and new changes (background).
    public var pushStream: String { prefix + "stream:push" }
    /// A fingerprint of a field value this server wrote to a card, so the webhook that echoes it is not taken for an edit.
    public func echo(account: String, card: String, field: String, hash: String) -> String {
        prefix + "echo:" + account + ":" + card + ":" + field + ":" + hash
    }
    /// A card this server is creating in a list, known by its title until Trello tells its id.
    public func echoCreate(account: String, syncList: String, titleHash: String) -> String {
        prefix + "echo:" + account + ":new:" + syncList + ":" + titleHash
    }
    /// Sliding-window request logs for Trello's rate limits (keyed by a hash of the token or key, never the secret).
    public func trelloWindow(_ hashedCredential: String) -> String { prefix + "trello:window:" + hashedCredential }
    /// Set while Trello has told us to back off for a token.
    public func trelloPause(_ hashedCredential: String) -> String { prefix + "trello:pause:" + hashedCredential }
    /// `ChangeAnnouncement`s: an account has new pending changes (every API process follows it for its open change
    /// streams; no consumer group).
    public var changeAnnouncements: String { prefix + "stream:changes" }
    /// Hash: the devices of an account that hold an open change stream → until when (ms since 1970), renewed at each
    /// heartbeat; roundup-pusher sends them no background push. The key expires with its last stream.
    public func streamingDevices(account: String) -> String { prefix + "streams:" + account }
    /// Sorted set: what an account holds open on every API process (`kind`: its change streams, its exports), members
    /// scored by when they expire unless renewed (`AccountLeases` in RoundupAPI).
    public func accountLeases(account: String, kind: String) -> String { prefix + "leases:" + account + ":" + kind }
    /// A bearer token the store accepted lately (by a prefix of its SHA-256), so the authentication throttle of an
    /// address that also sends bad tokens refuses guesses only, never a token that works (`AuthThrottle`). Expires a
    /// day after the token was last found.
    public func acceptedToken(_ tokenHash: String) -> String { prefix + "authok:" + tokenHash.prefix(32) }
    /// Hash: the streams an operator paused (`roundupctl pause`) → since when (ms since 1970). Workers and pushers read
    /// nothing new from a paused stream (`PauseWatcher`).
    public var pausedStreams: String { prefix + "paused" }
    /// Push entries that are no push request (`PushRequest`): dead-lettered as they are read, kept for an operator.
    public var pushDeadLetters: String { prefix + "stream:push:dead" }
    /// The consumer group of roundup-pusher on the push stream.
    public var pusherGroup: String { "pushers" }
    /// Set while a device had a background push within the window.
    public func recentPush(account: String, device: String) -> String { prefix + "push:recent:" + account + ":" + device }
    /// Sorted set of "account|device" waiting for the end of their window (score: when, in ms).
    public var deferredPushes: String { prefix + "push:deferred" }
    /// Set: the distinct bearer or bootstrap tokens (hash prefixes) that failed from one client address (IPv4, or an
    /// IPv6 /64) in the current fixed window; it expires with the window (`ROUNDUP_AUTH_FAILURE_LIMIT`).
    public func authFailures(address: String) -> String { prefix + "authfail:" + address }
    /// An account's token epoch: advanced before and after every revocation of its token, so an API process looks a
    /// token it kept up again (`TokenCache` in RoundupAPI). Named so that the account's deletion purges it.
    public func authEpoch(account: String) -> String { prefix + "auth:" + account + ":epoch" }
}
