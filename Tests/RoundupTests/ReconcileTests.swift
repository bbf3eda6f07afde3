import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStore
import RoundupStreams
import RoundupTesting
import Testing

/// Reconciliation and webhook repair with the real processes, a real redis-server and the fake Trello.
@Suite(.serialized) struct ReconcileTests {
    static let manual = ["ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0"]

    func startStack(_ backend: StoreBackend, workers: Int = 1, extra: [String: String] = manual) async throws -> Stack {
        let stack = try await Stack(store: backend)
        try await stack.startIngress()
        for i in 1...workers { try await stack.startWorker(name: "w\(i)", extra: extra) }
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: extra)
        return stack
    }

    func reconcile(_ s: SyncSetup) async throws -> JSONValue {
        let started = try await s.stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/reconcile", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        return try await s.wait(job: try #require(started.json["job_id"]?.stringValue))
    }

    @Test(arguments: StoreBackend.available) func editsWhoseWebhooksWereLostComeBackOnceAndASecondRunFindsNothing(backend: StoreBackend) async throws
    {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lrec", board: "Brec")
        let a = stack.trello.userCreateCard(listID: "Lrec", name: "Alpha")
        let b = stack.trello.userCreateCard(listID: "Lrec", name: "Bravo")
        let c = stack.trello.userCreateCard(listID: "Lrec", name: "Charlie")
        try await stack.quiet()
        let creates = try await s.changes()
        #expect(creates.count == 3)
        try await s.ack(creates, reminders: [a: "RA", b: "RB", c: "RC"])

        // Trello's deliveries of these edits are lost (an outage of ours it gave up retrying, or a webhook it disabled).
        stack.trello.state.withLockedValue { $0.deliverWebhooks = false }
        let d = stack.trello.userCreateCard(listID: "Lrec", name: "Delta")
        stack.trello.userUpdateCard(id: a, ["name": "Alpha, renamed"])
        stack.trello.userUpdateCard(id: b, ["closed": true])
        stack.trello.userUpdateCard(id: c, ["dueComplete": true])
        stack.trello.state.withLockedValue { $0.deliverWebhooks = true }
        try await stack.quiet()
        #expect(try await s.changes().isEmpty, "nothing reached us")

        let job = try await reconcile(s)
        #expect(job["status"] == "completed", "\(job)")
        let summary = try #require(job["results"]?[0]?["summary"])
        #expect(summary["cards"] == .number(3))
        #expect(
            summary["changes"] == .object(["create": .number(1), "update": .number(1), "delete": .number(1), "complete": .number(1)]), "\(summary)")
        let healed = try await s.changes()
        #expect(healed.count == 4, "\(healed)")
        func change(_ card: String) -> JSONValue? { healed.first { $0["trello_card_id"] == .string(card) } }
        #expect(change(d)?["change_type"] == "create" && change(d)?["fields"]?["title"] == "Delta")
        #expect(change(a)?["change_type"] == "update" && change(a)?["changed_fields"] == .array(["title"]) && change(a)?["reminder_id"] == "RA")
        #expect(change(a)?["fields"]?["title"] == "Alpha, renamed")
        #expect(change(b)?["change_type"] == "delete")
        #expect(change(c)?["change_type"] == "complete")

        // In sync now: a second run emits nothing.
        let again = try await reconcile(s)
        #expect(again["results"]?[0]?["summary"]?["changes"] == .object([:]), "\(again)")
        #expect(try await s.changes().count == 4)
        let lists = try await stack.callAPI(.GET, "/dailyroundup/lists", token: s.token).json["lists"]?.arrayValue ?? []
        #expect(lists.first?["last_reconciled_at"]?.stringValue.flatMap(Timestamp.date) != nil)
        await stack.shutdown()
    }

    /// One rule for board webhooks (`WebhookRegistrar`): an account's lists on one board share its board webhook, from
    /// the pairing on; when Trello loses it, the first list reconciled registers one again for both, and the other's
    /// reconciliation finds it healthy. Deleting one list keeps the board webhook the other still uses.
    @Test func listsOnOneBoardShareOneBoardWebhookThroughPairingRepairAndDeletion() async throws {
        let stack = try await startStack(.sqlite)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lone", board: "Bshared")
        stack.trello.addList(id: "Ltwo", boardID: "Bshared")
        let paired = try await stack.callAPI(
            .POST, "/dailyroundup/lists", token: s.token,
            body: JSONValue.object(["name": "Chores", "trello_board_id": "Bshared", "trello_list_id": "Ltwo"]).canonicalJSON)
        #expect(paired.status == .created, "\(paired.body)")
        let second = SyncSetup(
            stack: stack, account: s.account, token: s.token, listID: try #require(paired.json["sync_list_id"]?.stringValue), trelloList: "Ltwo",
            board: "Bshared")
        #expect(stack.trello.webhooks.map(\.idModel).sorted() == ["Bshared", "Lone", "Ltwo"], "\(stack.trello.webhooks)")
        let boardHook = try #require(stack.trello.webhooks.first { $0.idModel == "Bshared" })
        stack.trello.removeWebhook(id: boardHook.id)

        let first = try await reconcile(s)
        #expect(first["results"]?[0]?["summary"]?["webhooks_registered"] == .number(1), "\(first)")
        let other = try await reconcile(second)
        #expect(other["results"]?[0]?["summary"]?["webhooks_registered"] == .number(0), "\(other)")
        let boards = stack.trello.webhooks.filter { $0.idModel == "Bshared" }
        #expect(boards.count == 1 && boards.first?.id != boardHook.id, "\(stack.trello.webhooks)")

        // The first list goes: its own webhook with it, the board's stays for the second.
        let deleted = try await stack.callAPI(.DELETE, "/dailyroundup/lists/\(s.listID)", token: s.token)
        #expect(deleted.status == .noContent, "\(deleted.body)")
        #expect(stack.trello.webhooks.map(\.idModel).sorted() == ["Bshared", "Ltwo"], "\(stack.trello.webhooks)")
    }

    @Test(arguments: StoreBackend.available) func lostAndDeactivatedWebhooksAreRegisteredAgainAndARevokedTokenFlagsTheAccount(
        backend: StoreBackend
    ) async throws {
        let stack = try await startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lhook", board: "Bhook")
        let before = stack.trello.webhooks
        let listHook = try #require(before.first { $0.idModel == "Lhook" })
        let boardHook = try #require(before.first { $0.idModel == "Bhook" })
        stack.trello.deactivateWebhook(id: listHook.id)
        stack.trello.removeWebhook(id: boardHook.id)

        let job = try await reconcile(s)
        #expect(job["status"] == "completed", "\(job)")
        #expect(job["results"]?[0]?["summary"]?["webhooks_registered"] == .number(2))
        let after = stack.trello.webhooks
        #expect(Set(after.map(\.idModel)) == ["Lhook", "Bhook"] && after.count == 2, "\(after)")
        let ownPath = try await stack.webhookPath(account: s.account)
        #expect(after.allSatisfy { $0.callbackURL == stack.publicURL + ownPath })
        #expect(!after.contains { $0.id == listHook.id || $0.id == boardHook.id })
        // Named as the pairing names them, whoever registered them.
        #expect(before.map(\.description).sorted() == [WebhookDescription.board, WebhookDescription.list("Errands")], "\(before)")
        #expect(after.map(\.description).sorted() == before.map(\.description).sorted(), "\(after)")
        // Registered again means Trello checked the callback with HEAD (the fake does, against the real ingress), and
        // deliveries flow again.
        let card = stack.trello.userCreateCard(listID: "Lhook", name: "Echo")
        try await stack.quiet()
        #expect(try await s.changes().contains { $0["trello_card_id"] == .string(card) })
        // A second run leaves healthy webhooks alone.
        let again = try await reconcile(s)
        #expect(again["results"]?[0]?["summary"]?["webhooks_registered"] == .number(0))

        // The user revokes the token in Trello: the account is flagged (not retried forever) and the devices alerted.
        stack.trello.revokeToken("test-token")
        let failed = try await reconcile(s)
        #expect(failed["status"] == "error" && failed["error"]?.stringValue?.contains("revoked") == true, "\(failed)")
        let account = try await stack.callAPI(.GET, "/dailyroundup/account", token: s.token)
        #expect(account.json["needs_attention"] == "trello_token_revoked", "\(account.body)")
        let pushes = try await stack.redis.send("XRANGE", RedisArgument(stack.keys.pushStream), "-", "+").streamEntries
        #expect(pushes.contains { $0.fields["reason"] == Array("trello_token_revoked".utf8) })
        // A new token clears it.
        stack.trello.addToken("fresh-token")
        let put = try await stack.callAPI(.PUT, "/dailyroundup/account", token: s.token, body: #"{"trello_token":"fresh-token"}"#)
        #expect(put.json["needs_attention"] == .null, "\(put.body)")
        #expect(try await reconcile(s)["status"] == "completed")
        await stack.shutdown()
    }

    @Test(arguments: StoreBackend.available) func twoWorkersOnAScheduleNeverReconcileOneListAtOnce(backend: StoreBackend) async throws {
        let stack = try await startStack(backend, workers: 2, extra: ["ROUNDUP_RECONCILE_INTERVAL_SECONDS": "1"])
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lsched", board: "Bsched")
        for i in 0..<20 { stack.trello.userCreateCard(listID: "Lsched", name: "Card \(i)") }
        // The webhooks of the new cards are applied first: the worker reads the list for them in bulk (a list read of
        // its own, which may overlap a scheduled run and is not one), and only the runs' reads are counted after.
        #expect(try await TestSupport.eventually(timeout: .seconds(30)) { try await s.changes().count == 20 })
        stack.trello.state.withLockedValue { $0.listReadsMax["Lsched"] = $0.listReadsInFlight["Lsched"] ?? 0 }
        // Slow Trello: each run takes over a second, so two workers would overlap if nothing kept them apart.
        stack.trello.setRequestDelay(.milliseconds(300))
        let ran = await TestSupport.eventually(timeout: .seconds(30)) { stack.trello.listReads("Lsched") >= 4 }
        #expect(ran, "scheduled runs happened: \(stack.trello.listReads("Lsched"))")
        #expect(stack.trello.maxConcurrentListReads("Lsched") == 1)
        stack.trello.setRequestDelay(.zero)
        try await stack.quiet()
        // However many runs, each card reached the apps once.
        let changes = try await s.changes()
        #expect(changes.count == 20 && Set(changes.compactMap { $0["trello_card_id"]?.stringValue }).count == 20)
        let metrics =
            try await stack.get(port: stack.workerPorts["w1"] ?? 0, "/metrics").body
            + (try await stack.get(port: stack.workerPorts["w2"] ?? 0, "/metrics").body)
        #expect(metrics.contains("roundup_reconcile_runs_total") && metrics.contains("roundup_reconcile_oldest_age_seconds"))
        await stack.shutdown()
    }
}
