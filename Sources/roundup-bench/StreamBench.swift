import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupTesting

/// `roundup-bench stream ACCOUNTS RATE SECONDS [IDLE_STREAMS]`: the latency from the ingress's 200 for a webhook to
/// its change arriving on an open change stream, through the real ingress, worker and API. ACCOUNTS accounts hold a
/// stream each; signed `createCard` webhooks arrive at RATE per second for SECONDS, each for a random account. Then
/// the same changes as a 60-second poll would have seen them (each account polling at a random phase), and the API's
/// memory per open stream (its RSS with IDLE_STREAMS more streams open, against before). Each account also has a
/// device, and a roundup-pusher (window 0, so every change's push is sent at once) sends to the fake APNs: the
/// servers' own latency histograms, webhook → change and change → push, are read from their /metrics at the end.
enum StreamBench {
    static func run(accounts: Int, rate: Int, seconds: Int, idleStreams: Int) async throws {
        let stack = try await BenchStack.start(worker: [:])
        let apns = try await FakeAPNs.start()
        try await stack.startPusher(apns: apns, extra: ["ROUNDUP_PUSH_WINDOW_SECONDS": "0", "LOG_LEVEL": "warning"])
        var setups: [(account: String, token: String, path: String, list: String, board: String)] = []
        for i in 0..<accounts {
            let (token, _) = try await BenchStack.account(stack, list: "SL\(i)", board: "SB\(i)")
            let account = try BenchStack.json(try await stack.callAPI(.GET, "/dailyroundup/account", token: token))["account_id"]!.stringValue!
            setups.append((account, token, try await stack.webhookPath(account: account), "SL\(i)", "SB\(i)"))
            let device = String(format: "%064x", i)
            _ = try BenchStack.json(
                try await stack.callAPI(
                    .POST, "/dailyroundup/devices", token: token,
                    body: #"{"device_id":"bench-\#(i)","apns_token":"\#(device)","platform":"ios","environment":"production"}"#))
        }
        let base = "http://127.0.0.1:\(stack.apiPort)/dailyroundup/changes/stream"
        var streams: [EventStreamReader] = []
        for setup in setups {
            let stream = try await EventStreamReader.open(url: base, headers: ["authorization": "Bearer \(setup.token)"])
            guard stream.status == .ok else { benchFail("stream: \(stream.status) \(stream.errorBody)") }
            streams.append(stream)
        }
        // Each webhook: the time its 200 came back, by card.
        let accepted = NIOLockedValueBox<[String: ContinuousClock.Instant]>([:])
        let total = rate * seconds
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<total {
                let due = start + .milliseconds(n * 1000 / rate)
                try await Task.sleep(until: due, clock: .continuous)
                let setup = setups[Int.random(in: 0..<setups.count)]
                let card = "stream-card-\(n)"
                stack.trello.setCard(FakeTrello.card(id: card, listID: setup.list, boardID: setup.board, name: "Stream bench \(n)"))
                let body = WebhookBodies.body(type: "createCard", actionID: "stream-act-\(n)", cardID: card, listID: setup.list, boardID: setup.board)
                group.addTask {
                    let response = try await stack.postWebhook(path: setup.path, body: body, secret: stack.trello.webhookSecret)
                    guard response.status == .ok else { benchFail("webhook: \(response.status) \(response.body)") }
                    accepted.withLockedValue { $0[card] = .now }
                }
            }
            try await group.waitForAll()
        }
        // Every change on its stream (or give up after 30 s).
        let deadline = ContinuousClock.now + .seconds(30)
        while streams.reduce(0, { $0 + $1.events.count }) < total, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
        }
        var latencies: [Double] = []
        var polled: [Double] = []
        let sent = accepted.withLockedValue { $0 }
        for stream in streams {
            // The account polls every 60 s from a random phase; a change is seen at the first poll after it was stored
            // (its arrival on the stream is taken as that moment: later than the commit, so this favours polling).
            let phase = Double.random(in: 0..<60)
            for event in stream.events {
                guard let card = (try? JSONParser.parse(Array(event.data.utf8)))?["trello_card_id"]?.stringValue, let at = sent[card] else {
                    continue
                }
                let latency = Self.seconds(event.receivedAt - at)
                latencies.append(latency)
                let stored = Self.seconds(event.receivedAt - start)
                let nextPoll = phase + 60 * ((stored - phase) / 60).rounded(.up)
                polled.append(nextPoll - stored + latency)
            }
        }
        let pid = try requirePid(stack)
        let before = Self.rss(pid)
        var idle: [EventStreamReader] = []
        // Streams of one account are bounded per account: the idle ones belong to accounts of their own.
        var idleTokens: [String] = []
        for _ in 0..<max(1, idleStreams / 10) {
            idleTokens.append(
                try BenchStack.json(try await stack.callAPI(.POST, "/dailyroundup/account", token: BenchStack.bootstrap))["auth_token"]!.stringValue!)
        }
        for n in 0..<idleStreams {
            let stream = try await EventStreamReader.open(
                url: base, headers: ["authorization": "Bearer \(idleTokens[n / 10 % idleTokens.count])"])
            guard stream.status == .ok else { benchFail("idle stream \(n): \(stream.status) \(stream.errorBody)") }
            idle.append(stream)
        }
        try await Task.sleep(for: .seconds(1))
        let after = Self.rss(pid)
        print(
            String(
                format: "stream: %d webhooks at %d/s over %d accounts, %d arrived: p50 %.1f ms, p99 %.1f ms, max %.1f ms", total, rate, accounts,
                latencies.count, percentile(latencies, 0.50) * 1000, percentile(latencies, 0.99) * 1000, (latencies.max() ?? 0) * 1000))
        print(String(format: "poll60: p50 %.1f s, p99 %.1f s", percentile(polled, 0.50), percentile(polled, 0.99)))
        if idleStreams > 0 {
            print(
                String(
                    format: "memory: API RSS %.1f MB with %d streams, %.1f MB with %d more: %.1f KB per stream", Double(before) / 1_048_576, accounts,
                    Double(after) / 1_048_576, idleStreams, Double(after - before) / 1024 / Double(idleStreams)))
        }
        // The servers' own histograms (Prometheus buckets, interpolated as histogram_quantile does).
        let worker = try await stack.get(port: stack.workerPorts["bench"]!, "/metrics").body
        let pusher = try await stack.get(port: stack.pusherPorts["p1"]!, "/metrics").body
        for (name, text) in [("webhook->change", worker), ("change->push", pusher)] {
            let label = name == "webhook->change" ? "roundup_webhook_to_change_seconds" : "roundup_change_to_push_seconds"
            let histogram = PrometheusHistogram(text: text, name: label)
            print(
                String(
                    format: "latency: %@ p50 %.1f ms, p99 %.1f ms (%d observed, server histogram %@)", name, histogram.quantile(0.50) * 1000,
                    histogram.quantile(0.99) * 1000, histogram.count, label))
        }
        for stream in streams + idle { await stream.close() }
        await stack.shutdown()
        await apns.stop()
        if latencies.count < total { benchFail("\(total - latencies.count) changes never arrived on their stream") }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        guard !values.isEmpty else { return 0 }
        let sorted = values.sorted()
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
    }

    /// A process's resident memory in bytes (`VmRSS` of /proc/PID/status).
    static func rss(_ pid: pid_t) -> Int {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kb = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return 0 }
        return kb * 1024
    }
}

/// The API process's pid.
func requirePid(_ stack: Stack) throws -> pid_t {
    guard let api = stack.api else { benchFail("no API process") }
    return api.pid
}

/// A Prometheus histogram read from a text exposition: its cumulative buckets and count.
struct PrometheusHistogram {
    var buckets: [(le: Double, count: Double)] = []
    var count = 0

    init(text: String, name: String) {
        for line in text.split(separator: "\n") where line.hasPrefix(name + "_bucket{") {
            guard let le = line.firstMatch(of: /le="([^"]+)"/)?.1, let value = line.split(separator: " ").last.flatMap({ Double($0) }) else {
                continue
            }
            buckets.append((le == "+Inf" ? .infinity : Double(le) ?? .infinity, value))
        }
        buckets.sort { $0.le < $1.le }
        if let total = text.split(separator: "\n").first(where: { $0.hasPrefix(name + "_count") })?.split(separator: " ").last {
            count = Int(Double(total) ?? 0)
        }
    }

    /// As PromQL's histogram_quantile: linear within the bucket the rank falls in.
    func quantile(_ q: Double) -> Double {
        guard let total = buckets.last?.count, total > 0 else { return 0 }
        let rank = q * total
        var lower = (le: 0.0, count: 0.0)
        for bucket in buckets {
            if bucket.count >= rank {
                if bucket.le == .infinity { return lower.le }
                let inBucket = bucket.count - lower.count
                return lower.le + (bucket.le - lower.le) * (inBucket > 0 ? (rank - lower.count) / inBucket : 0)
            }
            lower = bucket
        }
        return lower.le
    }
}
