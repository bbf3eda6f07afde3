import Foundation
import HTTPTypes
public import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams
public import ServiceLifecycle
import Tracing

/// The open change streams of this API process (`GET /dailyroundup/changes/stream`) and what wakes them: a
/// `ChangeAnnouncement` on Redis (written by whoever wrote the changes, on any machine) wakes the account's streams,
/// and a heartbeat wakes every stream, so a lost announcement delays a change by one heartbeat at most. A wake-up
/// carries no change: each stream reads the store after the last id it sent, so nothing is missed or repeated.
///
/// A `Service`: it follows the announcements and beats until the process stops; at a graceful shutdown it ends every
/// stream first, so their responses complete and the HTTP server can drain.
public final class ChangeStreams: Service, Sendable {
    public struct Limits: Sendable, Equatable {
        /// Streams this process holds in all (`ROUNDUP_STREAMS_MAX`); 0 turns streams off.
        public var maxStreams: Int
        /// Streams one account holds on every API process together (`ROUNDUP_STREAMS_PER_ACCOUNT`).
        public var maxPerAccount: Int
        /// Between heartbeats (`ROUNDUP_STREAM_HEARTBEAT_SECONDS`).
        public var heartbeat: Duration
        /// A stream ends after this long, whatever it does (`ROUNDUP_STREAM_MAX_SECONDS`); its client reconnects from its
        /// last id. So a client that holds a stream and never reads holds it for this long at most.
        public var maxLifetime: Duration

        public init(maxStreams: Int = 2000, maxPerAccount: Int = 10, heartbeat: Duration = .seconds(15), maxLifetime: Duration = .seconds(3600)) {
            self.maxStreams = maxStreams
            self.maxPerAccount = maxPerAccount
            self.heartbeat = heartbeat
            self.maxLifetime = maxLifetime
        }
    }

    /// Why a stream should look at the store again. Signals are coalesced (a stream holds one at most): every one
    /// makes it read the store, so a heartbeat that replaces a `changed` loses nothing.
    public enum Signal: Sendable, Equatable {
        /// The account has new changes (an announcement, or the announcements may have been missed).
        case changed
        /// Time for a heartbeat comment (the store is read too).
        case heartbeat
    }

    /// One open stream: its signals end when the stream is closed (its connection ended, its token was revoked, the
    /// process is stopping).
    public struct Subscription: Sendable {
        public let id: Int
        public let account: String
        /// The device that holds it, when the app named one (`device_id`): it gets no background pushes meanwhile.
        public let device: String?
        public let signals: AsyncStream<Signal>
    }

    private struct Entry {
        var device: String?
        var continuation: AsyncStream<Signal>.Continuation
        /// Its place in the account's count across processes (`AccountLeases`), once granted.
        var lease: AccountLeases.Lease?
        /// When the stream last wrote to its client (nil before its first write): only a stream that writes keeps
        /// its device's mark.
        var lastWrite: ContinuousClock.Instant?
        /// Runs once the device's mark is gone, when this stream was the device's last (see `close`).
        var deviceStopped: (@Sendable () async -> Void)?
    }

    private struct State {
        var byAccount: [String: [Int: Entry]] = [:]
        var total = 0
        var nextID = 0
        var closed = false
        var reader: RedisConnection?
    }

    /// What happens to devices' marks, in the order it was asked for (one loop writes them: `writeMarks`), so a
    /// stream's mark can never land after its removal.
    enum MarkWork: Sendable {
        /// Marks the device of stream `id`, if that stream is still open.
        case mark(account: String, device: String, id: Int)
        /// Renews the marks of every device whose stream wrote lately.
        case renew
        /// Drops the device's mark unless another of its streams is open here, then runs `then`.
        case unmark(account: String, device: String, then: (@Sendable () async -> Void)?)
    }

    public let limits: Limits
    let redis: RedisClient
    let keys: RedisKeys
    let logger: Logger
    /// The account's streams counted on every process.
    let leases: AccountLeases
    private let state = NIOLockedValueBox(State())
    private let marks: AsyncStream<MarkWork>
    private let markQueue: AsyncStream<MarkWork>.Continuation

    public init(limits: Limits, redis: RedisClient, keys: RedisKeys, leases: AccountLeases, logger: Logger) {
        self.limits = limits
        self.redis = redis
        self.keys = keys
        self.leases = leases
        self.logger = logger
        (marks, markQueue) = AsyncStream.makeStream(of: MarkWork.self)
    }

    /// Streams open now.
    public var count: Int { state.withLockedValue { $0.total } }

    /// Opens a stream for the account, or throws the error its client gets: 503 when the process holds all it may
    /// (or is stopping), 429 when the account holds all it may (here, or on every process together: `AccountLeases`).
    /// `deviceStopped` runs after the device's mark is dropped when the stream closes (see `close`).
    func open(account: String, device: String?, deviceStopped: (@Sendable () async -> Void)? = nil) async throws -> Subscription {
        let (signals, continuation) = AsyncStream.makeStream(of: Signal.self, bufferingPolicy: .bufferingNewest(1))
        let opened = state.withLockedValue { state -> Result<Int, APIError> in
            guard !state.closed, state.total < limits.maxStreams else {
                return .failure(
                    APIError(
                        .serviceUnavailable, "streams_full",
                        "this server holds all the change streams it may; retry later or pull GET /dailyroundup/changes",
                        headers: [.retryAfter: "5"]))
            }
            guard state.byAccount[account, default: [:]].count < limits.maxPerAccount else { return .failure(Self.tooMany(limits)) }
            state.nextID += 1
            state.total += 1
            state.byAccount[account, default: [:]][state.nextID] = Entry(
                device: device, continuation: continuation, deviceStopped: deviceStopped)
            return .success(state.nextID)
        }
        let id = try opened.get()
        let subscription = Subscription(id: id, account: account, device: device, signals: signals)
        Gauge(label: "roundup_api_streams").record(count)
        // A lease lost later (it vanished from Redis in a stall and the account's places were taken meanwhile: see
        // `AccountLeases`) ends the stream: its client reconnects, and is refused while the account holds all it may.
        guard
            let lease = await leases.acquire(
                .streams, account: account, limit: limits.maxPerAccount, lost: { [weak self] in self?.close(subscription) })
        else {
            close(subscription)
            throw Self.tooMany(limits)
        }
        let kept = state.withLockedValue { state -> Bool in
            guard state.byAccount[account]?[id] != nil else { return false }
            state.byAccount[account]?[id]?.lease = lease
            return true
        }
        // Closed while the lease was being asked for (its connection ended): the lease goes back at once.
        if !kept { leases.releaseSoon(lease) }
        return subscription
    }

    static func tooMany(_ limits: Limits) -> APIError {
        APIError(
            .tooManyRequests, "too_many_streams",
            "the account holds \(limits.maxPerAccount) change streams already; close one first", headers: [.retryAfter: "5"])
    }

    /// The stream wrote to its client: the first write marks its device (it holds a stream now), and only streams that
    /// keep writing have their devices' marks renewed.
    func wrote(_ subscription: Subscription) {
        let first = state.withLockedValue { state -> Bool in
            guard let entry = state.byAccount[subscription.account]?[subscription.id] else { return false }
            state.byAccount[subscription.account]?[subscription.id]?.lastWrite = .now
            return entry.lastWrite == nil
        }
        if first, let device = subscription.device { markQueue.yield(.mark(account: subscription.account, device: device, id: subscription.id)) }
    }

    /// Closes a stream, however it ended (its response finished, its connection went away before or after the head,
    /// its token was revoked); the second call for one stream does nothing. Its place is given back here and across
    /// processes, and when its device holds no other stream here, the device's mark is dropped and then the
    /// `deviceStopped` given to `open` runs, in that order, so a push it queues reaches the device.
    func close(_ subscription: Subscription) {
        let entry = state.withLockedValue { state -> Entry? in
            guard let entry = state.byAccount[subscription.account]?.removeValue(forKey: subscription.id) else { return nil }
            if state.byAccount[subscription.account]?.isEmpty == true { state.byAccount[subscription.account] = nil }
            state.total -= 1
            return entry
        }
        guard let entry else { return }
        entry.continuation.finish()
        Gauge(label: "roundup_api_streams").record(count)
        if let lease = entry.lease { leases.releaseSoon(lease) }
        // A stream that never wrote never marked its device: the device's mark, if any, is another stream's (perhaps on
        // another process), and stays.
        if let device = entry.device, entry.lastWrite != nil {
            markQueue.yield(.unmark(account: subscription.account, device: device, then: entry.deviceStopped))
        }
    }

    /// Whether the device holds an open stream on this process.
    func isStreaming(account: String, device: String) -> Bool {
        state.withLockedValue { state in state.byAccount[account]?.values.contains { $0.device == device } ?? false }
    }

    /// Drops the device's mark, so roundup-pusher wakes it again.
    func unmark(account: String, device: String) async {
        let key = keys.streamingDevices(account: account)
        _ = try? await redis.send(RedisCommand("HDEL", [RedisArgument(key), RedisArgument(device)]), timeout: .seconds(2))
    }

    /// Wakes the account's streams.
    public func wake(account: String) {
        let continuations = state.withLockedValue { state in state.byAccount[account].map { $0.values.map(\.continuation) } ?? [] }
        for continuation in continuations { continuation.yield(.changed) }
    }

    /// Wakes every stream.
    func wakeAll(_ signal: Signal) {
        let continuations = state.withLockedValue { state in state.byAccount.values.flatMap { $0.values.map(\.continuation) } }
        for continuation in continuations { continuation.yield(signal) }
    }

    public func run() async throws {
        await withTaskGroup(of: Void.self) { marking in
            marking.addTask { await self.writeMarks() }
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.followAnnouncements() }
                group.addTask { await self.beat() }
                // Until the process stops: then no stream opens any more, every open one ends, and the loops stop.
                try? await gracefulShutdown()
                shutDown()
                group.cancelAll()
            }
            // The ended streams' marks are dropped before the loop that writes them stops, within 2 s for the streams to
            // end and 3 s for the marks (marks left behind expire within three heartbeats anyway).
            let deadline = ContinuousClock.now + .seconds(2)
            while count > 0, ContinuousClock.now < deadline {
                do { try await Task.sleep(for: .milliseconds(20)) } catch { break }
            }
            markQueue.finish()
            marking.addTask { try? await Task.sleep(for: .seconds(3)) }
            await marking.next()
            marking.cancelAll()
        }
    }

    /// Ends every stream, refuses new ones, and unblocks the announcement reader.
    func shutDown() {
        let (continuations, reader) = state.withLockedValue { state in
            state.closed = true
            return (state.byAccount.values.flatMap { $0.values.map(\.continuation) }, state.reader)
        }
        for continuation in continuations { continuation.finish() }
        reader?.close().whenComplete { _ in }
    }

    /// Follows the announcement stream from its end (`XREAD BLOCK` on a connection of its own). After a Redis
    /// failure every stream is woken once: announcements may have been missed meanwhile.
    func followAnnouncements() async {
        var last = "$"
        var failures = 0
        while !Task.isCancelled && !state.withLockedValue({ $0.closed }) {
            do {
                let reader = try await connectedReader()
                let reply = try await reader.send(
                    RedisCommand(
                        "XREAD", ["COUNT", "1000", "BLOCK", "2000", "STREAMS", RedisArgument(keys.changeAnnouncements), RedisArgument(last)]),
                    timeout: .seconds(7)
                ).get()
                if failures > 0 {
                    logger.notice("change announcements followed again", metadata: ["failures": "\(failures)"])
                    failures = 0
                    wakeAll(.changed)
                }
                var accounts = Set<String>()
                var traces: [TraceHeaders] = []
                for stream in reply.array ?? [] {
                    guard let pair = stream.array, pair.count == 2 else { continue }
                    for entry in pair[1].streamEntries {
                        last = entry.id
                        if let announcement = ChangeAnnouncement(fields: entry.fields) {
                            accounts.insert(announcement.account)
                            if let trace = announcement.trace { traces.append(trace) }
                        }
                    }
                }
                // Tracing on: the wake-up is a span linked to the work that made the changes.
                if traces.isEmpty {
                    for account in accounts { wake(account: account) }
                } else {
                    var attributes = SpanAttributes.processing("change announcements")
                    attributes["roundup.accounts"] = accounts.count
                    await RoundupTracing.withLinkedSpan("wake change streams", ofKind: .consumer, links: traces, attributes: attributes) {
                        for account in accounts { wake(account: account) }
                    }
                }
            } catch {
                if state.withLockedValue({ $0.closed }) { return }
                failures += 1
                if failures == 1 {
                    logger.warning("change announcements unavailable; streams fall back to their heartbeat", metadata: ["error": "\(error)"])
                }
                let broken = state.withLockedValue { state -> RedisConnection? in
                    defer { state.reader = nil }
                    return state.reader
                }
                broken?.close().whenComplete { _ in }
                try? await Task.sleep(for: .milliseconds(min(5000, 100 << min(failures, 6))))
            }
        }
    }

    private func connectedReader() async throws -> RedisConnection {
        if let reader = state.withLockedValue({ $0.reader }), reader.isActive { return reader }
        let reader = try await redis.dedicatedConnection(for: keys.changeAnnouncements).get()
        let closed = state.withLockedValue { state -> Bool in
            if state.closed { return true }
            state.reader = reader
            return false
        }
        if closed {
            reader.close().whenComplete { _ in }
            throw CancellationError()
        }
        return reader
    }

    /// Every heartbeat: a heartbeat signal to every stream, and the marks of the streaming devices renewed.
    func beat() async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: limits.heartbeat) } catch { return }
            wakeAll(.heartbeat)
            markQueue.yield(.renew)
        }
    }

    /// Writes devices' marks in the order they were asked for, until `markQueue` is finished. A device stopped
    /// (`MarkWork.unmark`'s `then`) runs beside the loop, after its mark is gone.
    func writeMarks() async {
        // Discarding: one child per stopped device, for the process's whole life, none kept once done.
        await withDiscardingTaskGroup { group in
            for await work in marks {
                switch work {
                case .mark(let account, let device, let id):
                    guard state.withLockedValue({ $0.byAccount[account]?[id] != nil }) else { continue }
                    await markStreaming([(account, device)])
                case .renew:
                    // Only streams that wrote within two heartbeats: one whose writes are stuck lets its device be woken
                    // by pushes again when its mark runs out.
                    let since = ContinuousClock.now - limits.heartbeat * 2
                    let devices = state.withLockedValue { state in
                        state.byAccount.flatMap { account, entries in
                            entries.values.compactMap { entry -> (String, String)? in
                                guard let device = entry.device, let last = entry.lastWrite, last >= since else { return nil }
                                return (account, device)
                            }
                        }
                    }
                    if !devices.isEmpty { await markStreaming(devices) }
                case .unmark(let account, let device, let then):
                    guard !isStreaming(account: account, device: device) else { continue }
                    await unmark(account: account, device: device)
                    if let then { group.addTask { await then() } }
                }
            }
        }
    }

    /// Marks devices as holding a stream until three heartbeats from now (`RedisKeys.streamingDevices`).
    func markStreaming(_ devices: [(account: String, device: String)]) async {
        let milliseconds = Int(limits.heartbeat.components.seconds) * 3000 + 1000
        let until = Int(Date().timeIntervalSince1970 * 1000) + milliseconds
        var commands: [RedisCommand] = []
        for (account, device) in devices {
            let key = RedisArgument(keys.streamingDevices(account: account))
            commands.append(RedisCommand("HSET", [key, RedisArgument(device), RedisArgument(until)]))
            commands.append(RedisCommand("PEXPIRE", [key, RedisArgument(milliseconds)]))
        }
        do {
            _ = try await redis.pipeline(commands, timeout: .seconds(2))
        } catch {
            logger.debug("streaming devices not marked", metadata: ["error": "\(error)"])
        }
    }
}
