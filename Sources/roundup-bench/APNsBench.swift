import Crypto
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RoundupPush
import RoundupTesting

/// `roundup-bench apns PUSHES`: pushes per second from roundup-pusher's sender (APNsClient over SwiftNIO HTTP/2)
/// over one and over four connections to the fake APNs (HTTP/2, TLS, JWT checked), beside h2load against the same
/// endpoint in the same run, with the same headers and payload.
enum APNsBench {
    /// Against the fake APNs (which checks every request).
    static func run(pushes: Int) async throws {
        let apns = try await FakeAPNs.start(maxConcurrentStreams: 1000)
        apns.state.withLockedValue { $0.record = false }
        let tokens = try APNsTokenProvider(keyFile: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
        try await measure(pushes: pushes, url: apns.url, caFile: apns.caFile, topic: apns.topic, tokens: tokens, label: "the fake APNs")
        await apns.stop()
    }

    /// Against any HTTP/2 TLS endpoint (nghttpd --echo-upload in scripts/bench): what the sender can do when the
    /// server is not the limit. A throwaway P-256 key signs the tokens (such an endpoint checks none).
    static func run(pushes: Int, url: String, caFile: String) async throws {
        let tokens = APNsTokenProvider(key: P256.Signing.PrivateKey(), keyID: "BENCHKEY01", teamID: "BENCHTEAM1")
        try await measure(pushes: pushes, url: url, caFile: caFile, topic: "app.dailyroundup.ios", tokens: tokens, label: url)
    }

    static func measure(pushes: Int, url: String, caFile: String, topic: String, tokens: APNsTokenProvider, label: String) async throws {
        let device = String(repeating: "ab", count: 32)

        // h2load first (the baseline), with a token the fake accepts.
        var h2loadRate: Double?
        let payloadFile = FileManager.default.temporaryDirectory.appendingPathComponent("apns-payload-\(UUID().uuidString).json")
        try #"{"aps":{"content-available":1},"roundup":{"sync":1}}"#.write(to: payloadFile, atomically: true, encoding: .utf8)
        let token = tokens.token().value
        for path in ["/usr/bin/h2load", "/usr/local/bin/h2load"] where FileManager.default.isExecutableFile(atPath: path) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = [
                "-n", String(pushes), "-c", "1", "-m", "100", "-d", payloadFile.path,
                "-H", "authorization: bearer \(token)", "-H", "apns-topic: \(topic)", "-H", "apns-push-type: background",
                "-H", "apns-priority: 5", "-H", "content-type: application/json", "\(url)/3/device/\(device)",
            ]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.run()
            let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            // "finished in 1.23s, 81234.56 req/s, …" and "status codes: N 2xx"
            if let line = output.split(separator: "\n").first(where: { $0.contains("finished in") }),
                let rate = line.split(separator: ",").dropFirst().first?.split(separator: " ").first.flatMap({ Double($0) })
            {
                h2loadRate = rate
            }
            if let codes = output.split(separator: "\n").first(where: { $0.contains("status codes:") }) {
                print("h2load \(codes.trimmingCharacters(in: .whitespaces))")
            }
            break
        }

        var results: [(connections: Int, rate: Double, ok: Int)] = []
        for connections in [1, 4] {
            let (rate, ok) = try await send(pushes: pushes, connections: connections, url: url, caFile: caFile, topic: topic, tokens: tokens)
            results.append((connections, rate, ok))
        }
        for r in results {
            let share = h2loadRate.map { String(format: " = %.0f%% of h2load", 100 * r.rate / $0) } ?? ""
            print(
                String(
                    format: "%@: our sender, %d connection(s), %d in flight: %d pushes at %.0f/s (%d answered 200)%@",
                    label, r.connections, 100 * r.connections, pushes, r.rate, r.ok, share))
        }
        print(
            h2loadRate.map { String(format: "%@: h2load -c1 -m100: %.0f requests/s", label, $0) }
                ?? "h2load not installed (apt-get install nghttp2-client)")
    }

    /// `roundup-bench apns-send PUSHES CONNECTIONS URL CA_FILE`: our sender alone, no h2load (scripts/bench-cost counts
    /// its instructions per push under callgrind). Exits non-zero unless every push was answered 200.
    static func sendOnly(pushes: Int, connections: Int, url: String, caFile: String) async throws {
        let tokens = APNsTokenProvider(key: P256.Signing.PrivateKey(), keyID: "BENCHKEY01", teamID: "BENCHTEAM1")
        let (rate, ok) = try await send(
            pushes: pushes, connections: connections, url: url, caFile: caFile, topic: "app.dailyroundup.ios", tokens: tokens)
        print(String(format: "%d pushes over %d connection(s) at %.0f/s, %d answered 200", pushes, connections, rate, ok))
        if ok != pushes { exit(1) }
    }

    /// Pushes `pushes` through one APNsClient of `connections` connections, 100 in flight per connection, after a warm-up
    /// of two per connection; the rate and how many were answered 200.
    static func send(
        pushes: Int, connections: Int, url: String, caFile: String, topic: String, tokens: APNsTokenProvider
    ) async throws -> (
        rate: Double, ok: Int
    ) {
        let payload = ByteBuffer(string: #"{"aps":{"content-available":1},"roundup":{"sync":1}}"#)
        let device = String(repeating: "ab", count: 32)
        let endpoint = try APNsClient.Endpoint(url: url)
        let client = try APNsClient(endpoint: endpoint, caFile: caFile, connections: connections, logger: Logger(label: "bench"))
        defer { client.shutdown() }
        for _ in 0..<connections * 2 {
            _ = try await client.send(
                APNsRequest(deviceToken: device, topic: topic, pushType: .background, payload: payload, expiration: Date().addingTimeInterval(3600)),
                token: tokens.token().value)
        }
        let inFlight = 100 * connections
        let started = ContinuousClock.now
        let ok = await withTaskGroup(of: Int.self) { group -> Int in
            var sent = 0
            var ok = 0
            func add() {
                guard sent < pushes else { return }
                sent += 1
                group.addTask {
                    let request = APNsRequest(
                        deviceToken: device, topic: topic, pushType: .background, payload: payload, expiration: Date().addingTimeInterval(3600))
                    do {
                        return try await client.send(request, token: tokens.token().value).status == 200 ? 1 : 0
                    } catch {
                        if ProcessInfo.processInfo.environment["BENCH_APNS_ERRORS"] != nil { print("push failed: \(error)") }
                        return 0
                    }
                }
            }
            for _ in 0..<inFlight { add() }
            while let result = await group.next() {
                ok += result
                add()
            }
            return ok
        }
        let elapsed = ContinuousClock.now - started
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return (Double(pushes) / seconds, ok)
    }
}
