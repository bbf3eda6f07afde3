import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Metrics
import NIOCore
import RoundupCore
import RoundupJobs
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams

/// `GET /dailyroundup/changes/stream`: the pending changes as Server-Sent Events. It first sends every pending change
/// after the client's position (`Last-Event-ID`, or `after_id`), then each new one as the store gets it; each
/// event's `id:` is the change id, so a client that reconnects with the last id it saw misses nothing and sees
/// nothing twice. A superseded change is followed by its replacement (a new id). Comments (`: heartbeat`) keep
/// proxies from closing a quiet stream. Opened with `device_id`, it sends only the changes no other device of the
/// account holds and hands each to this device (`ChangeClaim`, as a pull with `device_id`); at each heartbeat (and at
/// a wake-up a heartbeat or more after the last look) it also sends the changes below its place that another device
/// gave back or let lapse. Those carry no `id:` line (their ids, in the data, are lower than the stream's place, which
/// an EventSource's `Last-Event-ID` keeps).
extension ChangeRoutes {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
    /// Changes one read of the store takes at most.
    static let streamBatch = 200
    /// The most bytes of events one write holds (past it, the rest is read again after the write).
    static let streamBatchBytes = 256 * 1024

    func stream(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> Response {
        let after = try Self.streamPosition(request)
        let device = try await streamingDevice(account, request)
        let store = self.store
        let streams = signals.streams
        let logger = self.logger
        let redis = signals.redis
        let keys = signals.keys
        let claimFor = self.claimFor
        // The device got no background pushes while it streamed, and the last events written may never have reached it
        // (a connection that died quietly takes them into its buffer): if changes still wait to be acknowledged once it
        // stops streaming, wake the account's devices once.
        let subscription = try await streams.open(account: account, device: device) {
            guard (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 1))?.isEmpty == false else { return }
            _ = try? await redis.pipeline(NewChanges.commands(account: account, reason: .changes, keys: keys), timeout: .seconds(2))
        }
        // However the connection ends (reset before the head is written, during the replay, while idle), the stream's
        // place and its device's mark are given back: the body below may never run.
        context.connectionClosed?.whenComplete { _ in streams.close(subscription) }
        let token = signals.streamToken(account: account, credential: context.credential, store: store)
        let maxLifetime = streams.limits.maxLifetime
        Counter(label: "roundup_api_streams_opened_total").increment()
        let headers: HTTPFields = [
            .contentType: "text/event-stream", .cacheControl: "no-store", HTTPField.Name("X-Accel-Buffering")!: "no",
        ]
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                defer { streams.close(subscription) }
                var token = token
                do {
                    // Clients reconnect after a second when the stream ends (EventSource's `retry`).
                    try await writer.write(ByteBuffer(string: "retry: 1000\n: open\n\n"))
                    streams.wrote(subscription)
                    let ends = ContinuousClock.now + maxLifetime
                    var last = after
                    var signal: ChangeStreams.Signal? = .changed
                    var signals = subscription.signals.makeAsyncIterator()
                    let heartbeat = streams.limits.heartbeat
                    var nextSweep = ContinuousClock.now + heartbeat
                    signalling: while let current = signal {
                        var wrote = false
                        // With a device, each heartbeat also looks below the stream's place once, for changes another
                        // device held and gave back or let lapse (a change this device holds was sent already). By the
                        // clock too: on a busy account an announcement can take the place of a heartbeat's signal.
                        var sweep = device != nil && (current == .heartbeat || ContinuousClock.now >= nextSweep)
                        if sweep { nextSweep = ContinuousClock.now + heartbeat }
                        var below: Int64 = 0
                        while true {
                            var events = ChangeEvents()
                            var deviceGone = false
                            if let device {
                                let claim = ChangeClaim(
                                    deviceID: device, holdFor: claimFor, throughID: sweep ? last : .max, includeOwn: !sweep)
                                if let read = try await store.claimChanges(
                                    accountID: account, claim: claim, afterID: sweep ? below : last, limit: Self.streamBatch,
                                    into: ChangeEvents(withIDs: !sweep))
                                {
                                    events = read
                                } else {
                                    deviceGone = true
                                }
                            } else {
                                events = try await store.pendingChanges(
                                    accountID: account, afterID: last, limit: Self.streamBatch, into: ChangeEvents())
                            }
                            // Read, then checked, at every wake-up (a revocation wakes the account's streams) and before every
                            // write: a change written after the token's revocation is never sent.
                            switch await token.check() {
                            case .valid: break
                            case .revoked:
                                Counter(label: "roundup_api_streams_revoked_total").increment()
                                try await writer.write(ByteBuffer(string: Self.revokedEvent))
                                break signalling
                            case .unknown:
                                // Neither Redis nor the store could say: the client reconnects, and is authenticated anew.
                                break signalling
                            }
                            // The device was deleted while it streamed (its account still holds): the client registers
                            // it again, and reconnects.
                            if deviceGone { break signalling }
                            if events.count > 0 {
                                try await writer.write(contentsOf: ResponsePieces.split(events.out))
                                streams.wrote(subscription)
                                Counter(label: "roundup_api_stream_events_total").increment(by: events.count)
                                wrote = true
                            }
                            if sweep {
                                // The sweep's changes are below `last`, which stays; then the usual read above it.
                                below = events.last
                                if events.full { continue }
                                sweep = false
                                continue
                            }
                            guard events.count > 0 else { break }
                            last = events.last
                            if !events.full { break }
                        }
                        if current == .heartbeat && !wrote {
                            try await writer.write(ByteBuffer(string: ": heartbeat\n\n"))
                            streams.wrote(subscription)
                        }
                        if ContinuousClock.now >= ends { break }
                        signal = await signals.next()
                    }
                    // The process is stopping, the token was revoked or the stream is old: the client reconnects (to
                    // another process, perhaps) from its last id.
                    try await writer.finish(nil)
                } catch {
                    // The client went away, or the store failed: the client resumes from its last id either way.
                    logger.debug("change stream ended", metadata: ["account": "\(account)", "error": "\(error)"])
                    throw error
                }
            })
    }

    /// The last event of a stream whose token was revoked (rotated, or its account deleted): the client must not
    /// reconnect with that token.
    static let revokedEvent =
        "event: revoked\ndata: "
        + JSONValue.object([
            "error": .object([
                "code": "token_revoked",
                "message": "the token this stream was opened with was revoked (rotated, or the account deleted); reconnect with a valid one",
            ])
        ]).canonicalJSON + "\n\n"

    /// Changes as Server-Sent Events, written as the store reads them: `id:` is the change id, `data:` the change as
    /// on the page.
    struct ChangeEvents: PendingChangeSink {
        var count = 0
        var last: Int64 = 0
        /// Whether the read may have left changes behind: a whole batch, or `streamBatchBytes` reached.
        var full = false
        var isFull: Bool { full }
        var lastTaken: Int64 { last }
        // Empty until the first change: the store's copy is the only one that writes, so nothing is copied.
        var out = ByteBuffer()
        /// Whether each event carries its `id:` line (not for changes below the stream's place: `Last-Event-ID` stays).
        var withIDs = true

        mutating func take(_ change: PendingChangeCells) {
            guard !full else { return }
            if count == 0 { out.reserveCapacity(ChangeRoutes.streamBatch * 540) }
            if withIDs {
                out.writeString("id: ")
                out.writeString(String(change.id))
                out.writeString("\n")
            }
            out.writeString("event: change\ndata: ")
            ChangeRoutes.write(change, to: &out)
            out.writeString("\n\n")
            last = change.id
            count += 1
            if count == ChangeRoutes.streamBatch || out.readableBytes >= ChangeRoutes.streamBatchBytes { full = true }
        }
    }

    /// Where the stream starts: after `Last-Event-ID` (a reconnect), else after `after_id`, else from the first
    /// pending change.
    static func streamPosition(_ request: Request) throws -> Int64 {
        if let text = request.headers[lastEventID] {
            guard let value = Int64(text.trimmingCharacters(in: .whitespaces)), value >= 0 else {
                throw APIError.badRequest("Last-Event-ID must be a change id (a non-negative integer)")
            }
            return value
        }
        return try afterID(request.uri.queryParameters["after_id"].map(String.init)) ?? 0
    }

    /// The device named by `device_id`, which must be one of the account's: while it holds the stream, it gets no
    /// background pushes.
    func streamingDevice(_ account: String, _ request: Request) async throws -> String? {
        guard let text = request.uri.queryParameters["device_id"].map(String.init) else { return nil }
        guard try await store.devices(accountID: account).contains(where: { $0.deviceID == text }) else {
            throw APIError.unprocessable("device_id is not a device of this account (register it with POST /dailyroundup/devices)")
        }
        return text
    }
}

/// Whether the token a change stream was opened with still holds: the account's token epoch (`TokenCache`) is still
/// the one the token was valid at (one GET). When it moved, is missing or Redis cannot say, the store decides, and a
/// token it still gives to the account is checked against the epoch read before its answer from then on (a missing
/// epoch is made only once the store has said the token holds: a deleted account's is not brought back).
struct StreamToken: Sendable {
    enum Check { case valid, revoked, unknown }

    let account: String
    var credential: Credential?
    let redis: RedisClient
    let tokens: TokenCache
    let store: any AccountRepository
    /// When the store last said the token holds: the epoch is trusted for `TokenCache.lifetime` after it at most, as
    /// a kept token is (the bound for a revocation whose second advance Redis lost).
    var confirmed = ContinuousClock.now

    init(account: String, credential: Credential?, redis: RedisClient, tokens: TokenCache, store: any AccountRepository) {
        self.account = account
        self.credential = credential
        self.redis = redis
        self.tokens = tokens
        self.store = store
    }

    mutating func check() async -> Check {
        guard let credential else { return .unknown }
        let key = RedisArgument(tokens.keys.authEpoch(account: account))
        let now = try? await redis.send(RedisCommand("GET", [key]), timeout: .milliseconds(500))
        let lifetime = Duration.nanoseconds(tokens.lifetime.nanoseconds)
        if let epoch = credential.epoch, let now, now.string == String(epoch), ContinuousClock.now - confirmed < lifetime { return .valid }
        do {
            guard try await store.accountID(tokenHash: credential.tokenHash) == account else { return .revoked }
            confirmed = .now
            if let text = now?.string, let epoch = Int(text) {
                // Read before the store's answer: a revocation after it moves the epoch past this value.
                self.credential?.epoch = epoch
            } else if now != nil, let epoch = await tokens.epoch(account: account) {
                // No epoch (it expired): made now, and the store asked again after it, as `TokenCache.find` does.
                guard try await store.accountID(tokenHash: credential.tokenHash) == account else { return .revoked }
                self.credential?.epoch = epoch
            } else {
                // Redis cannot say: the store answers every check until it can.
                self.credential?.epoch = nil
            }
            return .valid
        } catch {
            return .unknown
        }
    }
}
