public import AsyncHTTPClient
public import Foundation
import NIOCore
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
public import RoundupStore
import RoundupStreams

/// The hostile-traffic scenarios' moving parts, shared by HostileTrafficTests (which assert on them) and
/// `roundup-chaos hostile` (which prints their figures for docs/RELIABILITY.md).
public enum HostileTraffic {
    /// Sends `count` requests made by `make`, `concurrency` at a time; returns how many got each status.
    public static func flood(
        _ http: HTTPClient, count: Int, concurrency: Int = 16, make: @escaping @Sendable (Int) -> HTTPClientRequest
    ) async throws -> [UInt: Int] {
        try await withThrowingTaskGroup(of: UInt.self) { group in
            var statuses: [UInt: Int] = [:]
            var next = 0
            func add() {
                let request = make(next)
                next += 1
                group.addTask {
                    let response = try await http.execute(request, timeout: .seconds(20))
                    _ = try await response.body.collect(upTo: 1 << 20)
                    return response.status.code
                }
            }
            for _ in 0..<min(concurrency, count) { add() }
            while let status = try await group.next() {
                statuses[status, default: 0] += 1
                if next < count { add() }
            }
            return statuses
        }
    }

    /// The `i`th of an unauthenticated flood of unique junk on both webhook paths: a 64 KB model id and an 8 KB
    /// account in the path (refused by their shape), and well-shaped ids nobody uses (looked up once, remembered as
    /// unknown in a bounded cache).
    public static func junk(_ i: Int, ingressPort: Int) -> HTTPClientRequest {
        let base = "http://127.0.0.1:\(ingressPort)/dailyroundup/webhook/trello"
        let fat = String(repeating: "x", count: 64 * 1024)
        let unique = "\(i)-\(UUID().uuidString)"
        var request: HTTPClientRequest
        switch i % 4 {
        case 0:
            request = HTTPClientRequest(url: base)
            request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"},"model":{"id":"\#(fat)\#(unique)"}}"#))
        case 1:
            request = HTTPClientRequest(url: base + "/" + fat.prefix(8 * 1024) + unique)
            request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"}}"#))
        case 2:
            request = HTTPClientRequest(url: base)
            request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"},"model":{"id":"\#(randomHex(24))"}}"#))
        default:
            request = HTTPClientRequest(url: base + "/" + UUID().uuidString.lowercased())
            request.body = .bytes(ByteBuffer(string: #"{"action":{"id":"a\#(i)","type":"updateCard"},"pad":"\#(fat)"}"#))
        }
        request.method = .POST
        request.headers.add(name: "content-type", value: "application/json")
        request.headers.add(name: "x-trello-webhook", value: "bm90IGEgc2lnbmF0dXJl")
        return request
    }

    public static func randomHex(_ count: Int) -> String {
        String((0..<count).map { _ in "0123456789abcdef".randomElement() ?? "0" })
    }

    /// Resident memory of a process in KB, from the kernel's accounting.
    public static func residentKB(_ pid: pid_t) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        return line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) }
    }

    /// Opens `count` connections that stall: half in the request head, half in the body.
    public static func stall(port: Int, path: String, count: Int) async throws -> [RawConnection] {
        var connections: [RawConnection] = []
        for i in 0..<count {
            let connection = try await RawConnection.connect(port: port)
            if i % 2 == 0 {
                try await connection.send("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            } else {
                try await connection.send(
                    "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{\"act")
            }
            connections.append(connection)
        }
        return connections
    }

    /// What a burst into a full Redis did: the answers by status, the cards whose action got a 200, and the cards of
    /// the changes the apps have once a worker has drained the stream.
    public struct FullRedisOutcome: Sendable {
        public var statuses: [UInt: Int] = [:]
        public var accepted = Set<String>()
        public var appliedCards: [String] = []
        public var drained = false
        public var deadLettered = 0
        public var healed = false
        /// When it did not heal: Redis's memory against its bound and the largest keys, to say what held the room.
        public var memoryReport = ""
    }

    /// Redis given a few hundred KB of room beyond what it holds and no eviction, the workers away, then a burst of
    /// `cards` createCard actions the way Trello delivers them (a 503 retried up to three times, every fourth action
    /// delivered twice); then a worker starts and drains. `stack` has its ingress running and `account` a synced L1.
    public static func fullRedis(_ stack: Stack, store: any ServerStore, account: String, secret: String, cards: Int) async throws -> FullRedisOutcome
    {
        var outcome = FullRedisOutcome()
        let path = "/dailyroundup/webhook/trello/\(account)"
        for i in 0..<cards {
            stack.trello.setCard(FakeTrello.card(id: "F\(i)", listID: "L1", boardID: "B1", name: "Card \(i)", desc: ""))
        }
        // Redis 7 keeps a latency histogram (~24 KB) for each command the first time it runs; the worker's commands,
        // whose set depends on timing (a reclaim, a pause), would take the margin that is meant for data and keep it
        // after the drain (the fresh-clone CI run of 484c440 did not heal once).
        _ = try await stack.redis.send("CONFIG", "SET", "latency-tracking", "no")
        let info = try await stack.redis.send("INFO", "memory").string ?? ""
        guard
            let used = info.split(separator: "\r\n").first(where: { $0.hasPrefix("used_memory:") }).flatMap({
                Int($0.dropFirst("used_memory:".count))
            })
        else {
            throw StackError("INFO memory has no used_memory")
        }
        _ = try await stack.redis.send("CONFIG", "SET", "maxmemory-policy", "noeviction")
        _ = try await stack.redis.send("CONFIG", "SET", "maxmemory", RedisArgument(String(used + 600 * 1024)))
        for i in 0..<cards {
            let body = WebhookBodies.body(type: "createCard", actionID: "full-\(i)", cardID: "F\(i)", listID: "L1", boardID: "B1", padding: 3_000)
            for _ in 0..<(i % 4 == 0 ? 2 : 1) {
                for _ in 0..<3 {
                    let response = try await stack.postWebhook(path: path, body: body, secret: secret)
                    outcome.statuses[response.status.code, default: 0] += 1
                    if response.status == .ok {
                        outcome.accepted.insert("F\(i)")
                        break
                    }
                }
            }
        }
        try await stack.startWorker(name: "full-redis-w1")
        let expected = outcome.accepted.count
        outcome.drained = await TestSupport.eventually(timeout: .seconds(60)) {
            (try? await store.pendingChanges(accountID: account, afterID: 0, limit: 1000).count) == expected
        }
        outcome.appliedCards = try await store.pendingChanges(accountID: account, afterID: 0, limit: 1000).map(\.trelloCardID)
        outcome.deadLettered = try await stack.redis.deadLetterCount(of: .webhooks, keys: stack.keys)
        outcome.healed = await TestSupport.eventually(timeout: .seconds(30)) {
            let body = WebhookBodies.body(
                type: "createCard", actionID: "after-\(UUID().uuidString.prefix(8))", cardID: "F0", listID: "L1", boardID: "B1")
            return (try? await stack.postWebhook(path: path, body: body, secret: secret).status) == .ok
        }
        if !outcome.healed {
            outcome.memoryReport = await memoryReport(stack.redis)
        }
        return outcome
    }

    /// `used_memory` against `maxmemory`, and every key with its type and `MEMORY USAGE`, largest first.
    static func memoryReport(_ redis: RedisClient) async -> String {
        var lines: [String] = []
        let info = (try? await redis.send("INFO", "memory").string) ?? ""
        let shown = ["used_memory:", "maxmemory:", "used_memory_dataset:", "mem_clients_normal:", "used_memory_scripts:", "used_memory_overhead:"]
        lines += info.split(separator: "\r\n").filter { line in shown.contains { line.hasPrefix($0) } }.map(String.init)
        let clients = (try? await redis.send("CLIENT", "LIST").string) ?? ""
        for client in clients.split(separator: "\n") {
            let fields = client.split(separator: " ").filter {
                ["name=", "tot-mem=", "qbuf=", "omem=", "cmd=", "age="].contains(where: $0.hasPrefix)
            }
            lines.append("client " + fields.joined(separator: " "))
        }
        var keys: [(name: String, type: String, bytes: Int)] = []
        var cursor = "0"
        repeat {
            guard let reply = try? await redis.send("SCAN", RedisArgument(cursor), "COUNT", "1000").array, reply.count == 2 else { break }
            cursor = reply[0].string ?? "0"
            for key in reply[1].array ?? [] {
                guard let name = key.string else { continue }
                let type = (try? await redis.send("TYPE", RedisArgument(name)).string) ?? "?"
                let bytes = (try? await redis.send("MEMORY", "USAGE", RedisArgument(name)).int) ?? -1
                keys.append((name, type, bytes))
            }
        } while cursor != "0"
        lines.append("\(keys.count) keys, \(keys.reduce(0) { $0 + $1.bytes }) bytes by MEMORY USAGE")
        for key in keys.sorted(by: { $0.bytes > $1.bytes }).prefix(15) {
            lines.append("\(key.bytes) \(key.type) \(key.name)")
        }
        return lines.joined(separator: "\n")
    }
}
