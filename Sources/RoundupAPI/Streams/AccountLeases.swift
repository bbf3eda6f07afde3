import Foundation
public import Logging
import Metrics
import NIOConcurrencyHelpers
import NIOCore
import RoundupCore
public import RoundupRedis
import RoundupRuntime
public import RoundupStreams
public import ServiceLifecycle

/// What an account holds open on every API process at once, counted in Redis: its change streams and its exports.
/// Each one held is a lease, a member of the account's sorted set (`RedisKeys.accountLeases(account:kind:)`) scored by
/// when it expires; the process renews the leases it holds every `renewal`, and a lease not renewed (its process
/// killed, its connection gone without a word) expires by itself after `lifetime`. So a count never stays wrong for
/// longer than `lifetime`, and nothing a client does grows a set beyond the account's limit.
///
/// A lease that vanished from Redis while its process still holds it (Redis stalled for longer than `lifetime`, or
/// restarted without its data, or the lease was granted while Redis could not be asked) is added again by the next
/// renewal if the account has room; if the set is full by then (other processes admitted leases meanwhile), the lease
/// is lost: whoever holds a place in Redis keeps it, and the holder of the lost one ends what it held (its `lost`
/// handler runs; `holds` answers false). So the account is back within its limit one renewal after Redis answers
/// again, and a set never holds more than the limit. A renewal re-adds the oldest of a process's leases first.
///
/// When Redis cannot be asked, a lease is granted (logged): the process's own limits (`ChangeStreams.Limits`) still
/// hold, and the API does not fail on a counter. It is recorded by the first renewal that reaches Redis, or lost as
/// above; while Redis cannot be reached at all nothing is closed (every process grants without it then).
public final class AccountLeases: Service, Sendable {
    public enum Kind: String, Sendable {
        case streams
        case exports
    }

    /// A lease held by this process.
    public struct Lease: Sendable, Hashable {
        let key: String
        let member: String
        let kind: Kind
        /// The account's limit it was granted under: a renewal that finds it gone adds it again only below this.
        let limit: Int
        /// Its order in this process: a renewal re-adds a process's older leases first.
        let sequence: Int
    }

    let redis: RedisClient
    let keys: RedisKeys
    let logger: Logger
    /// How long a lease lives without a renewal.
    let lifetime: Duration
    /// Between renewals of every held lease (a third of `lifetime`).
    var renewal: Duration { lifetime / 3 }
    /// This process's name in the members (`process:sequence`), so two processes never write one member.
    private let process = Hex.lowercase(UUID())
    private let state = NIOLockedValueBox(State())
    /// Leases to give back, from callers that cannot wait (a connection's close): `run` gives them back in order.
    private let releases: AsyncStream<Lease>
    private let releaseQueue: AsyncStream<Lease>.Continuation

    private struct State {
        /// Each held lease → what runs when it is lost.
        var held: [Lease: (@Sendable () -> Void)?] = [:]
        var next = 0
    }

    public init(redis: RedisClient, keys: RedisKeys, logger: Logger, lifetime: Duration = .seconds(30)) {
        self.redis = redis
        self.keys = keys
        self.logger = logger
        self.lifetime = lifetime
        (releases, releaseQueue) = AsyncStream.makeStream(of: Lease.self)
    }

    /// Leases held by this process now.
    public var count: Int { state.withLockedValue { $0.held.count } }

    /// A lease of `kind` for the account if it holds fewer than `limit` on every process together; nil when it holds
    /// them all. Granted without Redis when Redis cannot be asked. `lost` runs (once, from the renewal) if the lease
    /// vanished from Redis and the account had no room left to add it again: the caller must end what it holds.
    public func acquire(_ kind: Kind, account: String, limit: Int, lost: (@Sendable () -> Void)? = nil) async -> Lease? {
        let lease = state.withLockedValue { state -> Lease in
            state.next += 1
            return Lease(
                key: keys.accountLeases(account: account, kind: kind.rawValue), member: process + ":" + String(state.next), kind: kind,
                limit: limit, sequence: state.next)
        }
        do {
            let reply = try await redis.evaluate(
                Self.acquireScript, keys: [RedisArgument(lease.key)],
                arguments: [RedisArgument(lease.member), RedisArgument(Self.milliseconds(lifetime)), RedisArgument(limit)],
                timeout: .milliseconds(500))
            guard reply.int == 1 else { return nil }
        } catch {
            logger.warning("account leases unavailable: granted by this process's limits", metadata: ["error": "\(error)"])
        }
        state.withLockedValue { $0.held[lease] = .some(lost) }
        return lease
    }

    /// Whether this process still holds the lease: false once it was given back, or lost (see `acquire`).
    public func holds(_ lease: Lease) -> Bool {
        state.withLockedValue { $0.held[lease] != nil }
    }

    /// Gives a lease back (idempotent).
    public func release(_ lease: Lease) async {
        guard state.withLockedValue({ $0.held.removeValue(forKey: lease) }) != nil else { return }
        await remove(lease)
    }

    /// Gives a lease back soon, from code that cannot wait (`run` does it); this process stops counting it at once.
    public func releaseSoon(_ lease: Lease) {
        guard state.withLockedValue({ $0.held.removeValue(forKey: lease) }) != nil else { return }
        releaseQueue.yield(lease)
    }

    /// Renews the held leases every `renewal` and gives back those released with `releaseSoon`, until the process
    /// stops; then what is still held is given back (a process that stops holds nothing).
    public func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await lease in self.releases { await self.remove(lease) }
            }
            while !Task.isShuttingDownGracefully && !Task.isCancelled {
                do { try await cancelWhenGracefulShutdown { try await Task.sleep(for: self.renewal) } } catch { break }
                await renewAll()
            }
            releaseQueue.finish()
            await group.waitForAll()
            let held = state.withLockedValue { state in
                defer { state.held = [:] }
                return state.held
            }
            for lease in held.keys { await remove(lease) }
        }
    }

    private func remove(_ lease: Lease) async {
        do {
            _ = try await redis.send(RedisCommand("ZREM", [RedisArgument(lease.key), RedisArgument(lease.member)]), timeout: .seconds(2))
        } catch {
            logger.debug("lease left to expire", metadata: ["error": "\(error)"])
        }
    }

    /// Renews every lease this process holds (one script per key): each is pushed back, or added again when it vanished
    /// from Redis and the account has room; the others are lost (their `lost` handlers run).
    func renewAll() async {
        let byKey = Dictionary(grouping: state.withLockedValue { Array($0.held.keys) }, by: \.key)
        guard !byKey.isEmpty else { return }
        let ttl = RedisArgument(Self.milliseconds(lifetime))
        var failed = 0
        for (key, leases) in byKey {
            let ordered = leases.sorted { $0.sequence < $1.sequence }
            let limit = ordered.map(\.limit).min() ?? 0
            do {
                let reply = try await redis.evaluate(
                    Self.renewScript, keys: [RedisArgument(key)],
                    arguments: [ttl, RedisArgument(limit)] + ordered.map { RedisArgument($0.member) }, timeout: .seconds(2))
                let gone = Set((reply.array ?? []).compactMap(\.string))
                let lost = ordered.filter { gone.contains($0.member) }
                lose(lost)
                // A lease given back while the script ran may have been added again after its ZREM: removed once more
                // (the script ran before this, its ZREM may not have). One given back later is removed after this anyway.
                for lease in ordered where !gone.contains(lease.member) && !holds(lease) { await remove(lease) }
            } catch {
                failed += 1
                for lease in ordered where !holds(lease) { await remove(lease) }
            }
        }
        if failed > 0 { logger.warning("account leases not renewed", metadata: ["keys": "\(failed)"]) }
    }

    /// Leases that vanished from Redis and found no room to come back: no longer held, and their holders told.
    private func lose(_ leases: [Lease]) {
        for lease in leases {
            guard let lost = state.withLockedValue({ $0.held.removeValue(forKey: lease) }) else { continue }
            Counter(label: "roundup_api_leases_lost_total", dimensions: [("kind", lease.kind.rawValue)]).increment()
            logger.warning(
                "account lease lost (it vanished from Redis, and the account holds all it may now): what it held ends",
                metadata: ["key": "\(lease.key)", "kind": "\(lease.kind.rawValue)"])
            lost?()
        }
    }

    static func milliseconds(_ duration: Duration) -> Int {
        Int(duration.components.seconds) * 1000 + Int(duration.components.attoseconds / 1_000_000_000_000_000)
    }

    /// KEYS[1]: the account's leases of one kind; ARGV: member, lifetime in ms, limit. Drops expired leases, then adds
    /// the member if fewer than the limit remain: 1 granted, 0 refused. Times are Redis's own.
    static let acquireScript = RedisScript(
        name: "lease-acquire",
        source: """
            local t = redis.call('TIME')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
            if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
            redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
            redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
            return 1
            """)

    /// KEYS[1]: the account's leases of one kind; ARGV[1]: lifetime in ms, ARGV[2]: the limit, then members (a process's
    /// leases, oldest first). Pushes back the expiry of the members still there, then adds again, oldest first, those
    /// that vanished (expired during a stall, or never recorded) while fewer than the limit are there; returns the
    /// members that found no room (lost: another's lease holds the place now). Times are Redis's own.
    static let renewScript = RedisScript(
        name: "lease-renew",
        source: """
            local t = redis.call('TIME')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            local ttl = tonumber(ARGV[1])
            local limit = tonumber(ARGV[2])
            redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
            local missing = {}
            for i = 3, #ARGV do
              if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
                redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[i])
              else
                missing[#missing + 1] = ARGV[i]
              end
            end
            local lost = {}
            for _, member in ipairs(missing) do
              if redis.call('ZCARD', KEYS[1]) < limit then
                redis.call('ZADD', KEYS[1], now + ttl, member)
              else
                lost[#lost + 1] = member
              end
            end
            if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('PEXPIRE', KEYS[1], ttl) end
            return lost
            """)
}
