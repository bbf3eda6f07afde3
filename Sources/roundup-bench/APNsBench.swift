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
    static func run(pushes: Int) async throws {
        let apns = try await FakeAPNs.start(maxConcurrentStreams: 1000)
        apns.state.withLockedValue { $0.record = false }
        let tokens = try APNsTokenProvider(keyFile: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
        let payload = ByteBuffer(string: #"{"aps":{"content-available":1},"roundup":{"sync":1}}"#)
        let device = String(repeating: "ab", count: 32)
        let logger = Logger(label: "bench")

        // h2load first (the baseline), with a token the fake accepts.
        var h2loadRate: Double?
        let payloadFile = FileManager.default.temporaryDirectory.appendingPathComponent("apns-payload-\(UUID().uuidString).json")
        try #"{"aps":{"content-available":1},"roundup":{"sync":1}}"#.write(to: payloadFile, atomically: true, encoding: .utf8)
        let token = try apns.validProviderToken()
        for path in ["/usr/bin/h2load", "/usr/local/bin/h2load"] where FileManager.default.isExecutableFile(atPath: path) {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            process.arguments = [
                "-n", String(pushes), "-c", "1", "-m", "100", "-d", payloadFile.path,
                "-H", "authorization: bearer \(token)", "-H", "apns-topic: \(apns.topic)", "-H", "apns-push-type: background",
                "-H", "apns-priority: 5", "-H", "content-type: application/json", "\(apns.url)/3/device/\(device)",
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
            if let codes = output.split(separator: "\n").first(where: { $0.contains("status codes:") }) { print("h2load \(codes.trimmingCharacters(in: .whitespaces))") }
            break
        }

        var results: [(connections: Int, rate: Double, ok: Int)] = []
        for connections in [1, 4] {
            let endpoint = try APNsClient.Endpoint(url: apns.url)
            let client = try APNsClient(endpoint: endpoint, caFile: apns.caFile, connections: connections, logger: logger)
            // Warm the connections up.
            for _ in 0..<connections * 2 {
                _ = try await client.send(APNsRequest(deviceToken: device, topic: apns.topic, pushType: .background, payload: payload, expiration: Date().addingTimeInterval(3600)), token: tokens.token().value)
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
                        let request = APNsRequest(deviceToken: device, topic: apns.topic, pushType: .background, payload: payload, expiration: Date().addingTimeInterval(3600))
                        return (try? await client.send(request, token: tokens.token().value).status) == 200 ? 1 : 0
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
            results.append((connections, Double(pushes) / seconds, ok))
            client.shutdown()
        }
        await apns.stop()
        for r in results {
            let share = h2loadRate.map { String(format: " = %.0f%% of h2load", 100 * r.rate / $0) } ?? ""
            print(String(format: "apns sender, %d connection(s), %d in flight: %d pushes in %.0f/s (%d answered 200)%@",
                         r.connections, 100 * r.connections, pushes, r.rate, r.ok, share))
        }
        print(h2loadRate.map { String(format: "h2load -c1 -m100 against the same endpoint: %.0f requests/s", $0) } ?? "h2load not installed (apt-get install nghttp2-client)")
    }
}
