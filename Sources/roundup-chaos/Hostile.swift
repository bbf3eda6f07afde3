import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting

/// `roundup-chaos hostile`: the figures of the hostile-traffic scenarios, measured on the real processes, as
/// Markdown for docs/RELIABILITY.md. HostileTrafficTests asserts the same outcomes at a smaller scale.
enum HostileFigures {
    /// The table, and whether every target was met.
    static func run() async throws -> (lines: [String], met: Bool) {
        var lines = ["| scenario | figure | target | met |", "|---|---|---|---|"]
        let (junk, junkMet) = try await junkAndStalls()
        let (full, fullMet) = try await fullRedis()
        lines += junk + full
        return (lines, junkMet && fullMet)
    }

    static func mark(_ met: Bool) -> String { met ? "yes" : "**no**" }

    static func median(_ values: [Duration]) -> Duration { values.sorted()[values.count / 2] }

    static func ms(_ d: Duration) -> String {
        String(format: "%.1f ms", Double(d.components.attoseconds) / 1e15 + Double(d.components.seconds) * 1000)
    }

    /// Delivery times of `count` real signed deliveries, one after another.
    static func deliveries(_ stack: Stack, account: String, count: Int, tag: String) async throws -> [Duration] {
        var times: [Duration] = []
        for i in 0..<count {
            let body = WebhookBodies.body(type: "createCard", actionID: "\(tag)-\(i)", cardID: "J\(i)", listID: "L1", boardID: "B1")
            let started = ContinuousClock.now
            let response = try await stack.postWebhook(path: "/dailyroundup/webhook/trello/\(account)", body: body, secret: Chaos.secret)
            times.append(ContinuousClock.now - started)
            guard response.status == .ok else { throw StackError("a real delivery got \(response.status): \(response.body)") }
        }
        return times
    }

    static func junkAndStalls() async throws -> (lines: [String], met: Bool) {
        let stack = try await Stack()
        let account = try await Chaos.seed(stack, cards: 0, prefix: "J")
        _ = try await stack.redis.send("HSET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account), RedisArgument(Chaos.secret))
        try await stack.startIngress(extra: ["ROUNDUP_HTTP_HEAD_TIMEOUT_SECONDS": "5", "ROUNDUP_HTTP_BODY_TIMEOUT_SECONDS": "5"])
        guard let ingress = stack.ingress else { throw StackError("no ingress") }
        var lines: [String] = []

        // Unique junk: resident memory before, after 10,000 and after 10,000 more.
        _ = try await deliveries(stack, account: account, count: 50, tag: "warm")
        let before = HostileTraffic.residentKB(ingress.pid) ?? -1
        let port = stack.ingressPort
        let first = try await HostileTraffic.flood(stack.http, count: 10_000) { HostileTraffic.junk($0, ingressPort: port) }
        let after = HostileTraffic.residentKB(ingress.pid) ?? -1
        let second = try await HostileTraffic.flood(stack.http, count: 10_000) { HostileTraffic.junk($0 + 10_000, ingressPort: port) }
        let afterSecond = HostileTraffic.residentKB(ingress.pid) ?? -1
        let answers = first.merging(second, uniquingKeysWith: +).sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: ", ")
        let enqueued = try await stack.streamLength()
        let memoryMet = after - before <= 10 * 1024 && afterSecond - before <= 10 * 1024 && after <= 40 * 1024 && enqueued == 50
        lines.append(
            "| 10,000 then 10,000 more unique junk requests (64 KB ids, 8 KB paths, unknown well-shaped ids), no credentials | ingress resident \(before / 1024) MB before, \(after / 1024) MB after 10,000, \(afterSecond / 1024) MB after 20,000; answers \(answers); enqueued by the junk: \(enqueued - 50) | within 10 MB, ≤ 40 MB in all (after 10,000) | \(mark(memoryMet)) |"
        )

        // A real delivery beside 1,000 stalled connections, against one without them.
        let alone = try await deliveries(stack, account: account, count: 30, tag: "alone")
        let stalled = try await HostileTraffic.stall(port: stack.ingressPort, path: "/dailyroundup/webhook/trello/\(account)", count: 1_000)
        let beside = try await deliveries(stack, account: account, count: 30, tag: "beside")
        let stalledAt = ContinuousClock.now
        var closed = 0
        for connection in stalled where await connection.waitClosed(timeout: .seconds(10)) { closed += 1 }
        let closedIn = ContinuousClock.now - stalledAt
        for connection in stalled { await connection.close() }
        let stallMet = median(beside) - median(alone) < .milliseconds(100) && closed == 1_000
        lines.append(
            "| a real delivery beside 1,000 stalled connections (500 in the head, 500 in the body; 5 s deadlines) | median \(ms(median(alone))) alone, \(ms(median(beside))) beside them (max \(ms(alone.max() ?? .zero)) / \(ms(beside.max() ?? .zero))); \(closed) of 1,000 closed by the server, the last \(ms(closedIn)) after the deliveries | under 100 ms more; all closed | \(mark(stallMet)) |"
        )
        await stack.shutdown()
        return (lines, memoryMet && stallMet)
    }

    static func fullRedis() async throws -> (lines: [String], met: Bool) {
        let stack = try await Stack(privateRedis: true)
        let account = try await Chaos.seed(stack, cards: 0, prefix: "F")
        _ = try await stack.redis.send("HSET", RedisArgument(stack.keys.webhookSecrets), RedisArgument(account), RedisArgument(Chaos.secret))
        try await stack.startIngress()
        let store = try await stack.store()
        let outcome = try await HostileTraffic.fullRedis(stack, store: store, account: account, secret: Chaos.secret, cards: 600)
        let answers = outcome.statuses.sorted { $0.key < $1.key }.map { "\($0.value)× \($0.key)" }.joined(separator: ", ")
        let applied = Set(outcome.appliedCards)
        let lost = outcome.accepted.subtracting(applied).count
        let duplicated = outcome.appliedCards.count - applied.count
        await stack.shutdown()
        let onlyExpected = Set(outcome.statuses.keys).isSubset(of: [200, 503])
        let met = lost == 0 && duplicated == 0 && outcome.healed && onlyExpected && outcome.deadLettered == 0
        return (
            [
                "| Redis 600 KB from its maxmemory (noeviction), workers away, 600 actions delivered as Trello does (503 retried ×3, every fourth twice) | answers \(answers); \(outcome.accepted.count) actions got a 200, \(applied.intersection(outcome.accepted).count) applied once the worker started, lost \(lost), duplicated \(duplicated), dead-lettered \(outcome.deadLettered); ingress accepting again by itself: \(outcome.healed ? "yes" : "no") | only 200 or 503; every accepted event applied once | \(mark(met)) |"
            ], met
        )
    }
}
