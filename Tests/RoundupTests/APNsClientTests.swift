import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import RoundupPush
import RoundupTesting
import Testing

/// The APNs sender on its own against the fake APNs (HTTP/2 over TLS on loopback): many pushes in flight on one
/// connection, beyond the server's stream limit, each matched to its own answer; a push APNs never answers times out
/// alone, and the connection that stopped answering is replaced.
@Suite struct APNsClientTests {
    static func request(_ n: Int, topic: String, failing: Bool = false) -> APNsRequest {
        APNsRequest(
            deviceToken: String(format: "%064x", n), topic: topic, pushType: .background,
            payload: ByteBuffer(string: #"{"aps":{"content-available":1},"n":\#(n)}"#), expiration: Date().addingTimeInterval(3600))
    }

    @Test func pushesBeyondTheStreamLimitAreEachAnsweredOnce() async throws {
        let apns = try await FakeAPNs.start(maxConcurrentStreams: 16)
        defer { Task { await apns.stop() } }
        apns.state.withLockedValue { $0.failures[String(format: "%064x", 7)] = .init(status: 410, reason: "Unregistered") }
        let tokens = try APNsTokenProvider(keyFile: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
        let client = try APNsClient(
            endpoint: try .init(url: apns.url), caFile: apns.caFile, connections: 1, logger: Logger(label: "test"))
        defer { client.shutdown() }
        let requests = (0..<300).map { Self.request($0, topic: apns.topic) }
        let responses = try await withThrowingTaskGroup(of: (Int, APNsResponse).self) { group in
            for (n, request) in requests.enumerated() {
                group.addTask { (n, try await client.send(request, token: tokens.token().value)) }
            }
            return try await group.reduce(into: [Int: APNsResponse]()) { $0[$1.0] = $1.1 }
        }
        #expect(responses.count == 300)
        for (n, response) in responses {
            if n == 7 {
                #expect(response.status == 410 && response.reason == "Unregistered")
            } else {
                #expect(response.status == 200 && response.reason == nil)
                // The answer is this push's own: the fake echoes the apns-id it was sent.
                #expect(response.apnsID == requests[n].id.uuidString.lowercased())
            }
        }
        let delivered = apns.delivered
        #expect(delivered.count == 299)
        #expect(Set(delivered.map(\.deviceToken)).count == 299)
        #expect(delivered.allSatisfy { $0.payload.contains(#""n":"#) })
        #expect(apns.state.withLockedValue { $0.connections } == 1)
    }

    /// Every error answer carries a body, which uses up the connection's 64 KB receive window unless the client gives
    /// it back: 3,000 answers of ~50 bytes each need it returned twice over.
    @Test func errorAnswersBeyondTheConnectionsWindowKeepComing() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { await apns.stop() } }
        let device = String(format: "%064x", 1)
        apns.state.withLockedValue { $0.failures[device] = .init(status: 400, reason: "BadDeviceToken") }
        let tokens = try APNsTokenProvider(keyFile: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
        let client = try APNsClient(
            endpoint: try .init(url: apns.url), caFile: apns.caFile, connections: 1, timeout: .seconds(5), logger: Logger(label: "test"))
        defer { client.shutdown() }
        let reasons = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<100 {
                group.addTask {
                    var last: String?
                    for _ in 0..<30 { last = try await client.send(Self.request(1, topic: apns.topic), token: tokens.token().value).reason }
                    return last
                }
            }
            return try await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(reasons.count == 100 && reasons.allSatisfy { $0 == "BadDeviceToken" })
        #expect(apns.state.withLockedValue { ($0.answered.count, $0.connections) } == (3_000, 1))
    }

    @Test func aPushNeverAnsweredTimesOutAloneAndItsConnectionIsReplaced() async throws {
        let apns = try await FakeAPNs.start()
        defer { Task { await apns.stop() } }
        let tokens = try APNsTokenProvider(keyFile: apns.keyFile, keyID: apns.keyID, teamID: apns.teamID)
        let client = try APNsClient(
            endpoint: try .init(url: apns.url), caFile: apns.caFile, connections: 1, timeout: .milliseconds(500), logger: Logger(label: "test"))
        defer { client.shutdown() }
        #expect(try await client.send(Self.request(0, topic: apns.topic), token: tokens.token().value).status == 200)

        apns.state.withLockedValue { $0.stallNext = 1 }
        let started = ContinuousClock.now
        await #expect {
            _ = try await client.send(Self.request(1, topic: apns.topic), token: tokens.token().value)
        } throws: { error in
            guard case APNsError.noResponse(let why) = error else { return false }
            return why == .timedOut(milliseconds: 500)
        }
        let waited = ContinuousClock.now - started
        #expect(waited >= .milliseconds(450) && waited < .seconds(5))
        #expect(apns.state.withLockedValue { $0.stalled } == 1)

        // The next push goes out on a new connection and is answered.
        let next = try await client.send(Self.request(2, topic: apns.topic), token: tokens.token().value)
        #expect(next.status == 200)
        #expect(apns.state.withLockedValue { $0.connections } == 2)
        #expect(apns.delivered.map(\.deviceToken) == [String(format: "%064x", 0), String(format: "%064x", 2)])
    }
}
