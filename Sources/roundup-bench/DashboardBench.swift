import Foundation
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting

/// `roundup-bench dashboard RATE SECONDS PNG`: the operators' dashboard under load, photographed. The real ingress,
/// worker, API and pusher (against the fake APNs) take signed webhooks at RATE per second for SECONDS over twenty
/// accounts with a device each; a third of the way in the push stream is paused (its backlog grows), and for the last
/// sixth Trello fails every card fetch (entries retried, then dead-lettered). `roundupctl dashboard` runs beside them; at the
/// end headless Chromium writes its overview to PNG. Prints what the page showed.
enum DashboardBench {
    static func run(rate: Int, seconds: Int, png: String) async throws {
        let stack = try await BenchStack.start(worker: ["ROUNDUP_CLAIM_IDLE_MS": "1000", "ROUNDUP_MAX_DELIVERIES": "3"])
        let apns = try await FakeAPNs.start()
        try await stack.startPusher(apns: apns, extra: ["LOG_LEVEL": "warning"])
        var setups: [(path: String, list: String, board: String)] = []
        for i in 0..<20 {
            let (token, _) = try await BenchStack.account(stack, list: "DL\(i)", board: "DB\(i)")
            let account = try BenchStack.json(try await stack.callAPI(.GET, "/dailyroundup/account", token: token))["account_id"]!.stringValue!
            _ = try BenchStack.json(
                try await stack.callAPI(
                    .POST, "/dailyroundup/devices", token: token,
                    body: #"{"device_id":"d\#(i)","apns_token":"\#(String(format: "%064x", i + 1))","platform":"ios","environment":"production"}"#))
            setups.append((try await stack.webhookPath(account: account), "DL\(i)", "DB\(i)"))
        }
        let port = try TestSupport.freePort()
        let dashboard = try ManagedProcess(
            name: "dashboard", executable: TestSupport.binDirectory.appendingPathComponent("roundupctl"),
            arguments: ["dashboard", "--port", String(port)], environment: stack.environment.merging(["LOG_LEVEL": "warning"]) { $1 },
            logDirectory: stack.directory)
        let total = rate * seconds
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<total {
                try await Task.sleep(until: start + .milliseconds(n * 1000 / rate), clock: .continuous)
                if n == total / 3 { try await StreamPauses(redis: stack.redis, keys: stack.keys).pause(.push) }
                // Trello fails every card fetch from here on: entries retried, then dead-lettered.
                if n == total * 5 / 6 { stack.trello.failNextCardRequests(status: 500, count: 1_000_000) }
                let setup = setups[n % setups.count]
                let card = "dash-card-\(n)"
                stack.trello.setCard(FakeTrello.card(id: card, listID: setup.list, boardID: setup.board, name: "Dashboard bench \(n)"))
                let body = WebhookBodies.body(type: "createCard", actionID: "dash-act-\(n)", cardID: card, listID: setup.list, boardID: setup.board)
                group.addTask { _ = try await stack.postWebhook(path: setup.path, body: body, secret: stack.trello.webhookSecret) }
            }
            try await group.waitForAll()
        }
        let browser = try await HeadlessBrowser(directory: stack.directory, width: 1280, height: 1000)
        try await browser.open("http://127.0.0.1:\(port)/")
        try await browser.screenshot().write(to: URL(fileURLWithPath: png))
        let rows = try await browser.evaluate(
            "[...document.querySelectorAll('tr[data-stream]')].map(r => r.dataset.stream + ': ' + [...r.querySelectorAll('td[data-field]')].map(t => t.dataset.field + ' ' + t.textContent.trim()).join(', ')).join('\\n')"
        )
        print("dashboard: \(total) webhooks at \(rate)/s over 20 accounts; screenshot \(png)")
        print(rows.stringValue ?? "")
        await browser.close()
        await dashboard.stop()
        await stack.shutdown()
        await apns.stop()
    }
}
