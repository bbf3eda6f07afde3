import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupStore
import RoundupTesting
import Testing

extension HostileTrafficTests {
    /// The ingress, a worker and the API (reconciliation only on demand), for tests that set accounts up as apps do.
    func startStackWithAPI(_ backend: StoreBackend) async throws -> Stack {
        let stack = try await Stack(store: backend)
        let manual = ["ROUNDUP_RECONCILE_INTERVAL_SECONDS": "0"]
        try await stack.startIngress()
        try await stack.startWorker(name: "w1", extra: manual)
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap, extra: manual)
        return stack
    }

    /// Two accounts on one Trello app key share its webhook secret. One of them signs webhooks for the other's list on
    /// every path the ingress knows; none of them changes what the victim's apps see.
    @Test(arguments: StoreBackend.available) func aForgedWebhookForAnotherAccountOnTheSameKeyChangesNothingTheAppsSee(
        backend: StoreBackend
    ) async throws {
        let stack = try await startStackWithAPI(backend)
        let victim = try await SyncSetup.make(stack, list: "Lvictim", board: "Bvictim")
        let attacker = try await SyncSetup.make(stack, list: "Lattacker", board: "Battacker")
        let secret = stack.trello.webhookSecret  // the app's: both accounts hold it

        // The victim's real card arrives through Trello's own delivery (to the victim's own URL).
        let card = stack.trello.userCreateCard(listID: "Lvictim", name: "Real title")
        try await stack.quiet()
        let before = try await victim.changes()
        #expect(before.count == 1 && before.first?["fields"]?["title"] == "Real title", "\(before)")
        try await victim.ack(before, reminders: [card: "R1"])

        // The attacker signs a rename, a completion and a delete of the victim's card, with the shared secret.
        let victimOwn = try await stack.webhookPath(account: victim.account)
        let attackerToken = String(try await stack.webhookPath(account: attacker.account).split(separator: "/").last ?? "")
        #expect(WebhookCallback.isToken(attackerToken))
        var forged = 0
        for (i, path) in ["/dailyroundup/webhook/trello", "/dailyroundup/webhook/trello/\(victim.account)"].enumerated() {
            let rename = WebhookBodies.body(
                type: "updateCard", actionID: "forged-rename-\(i)", cardID: card, listID: "Lvictim", boardID: "Bvictim",
                card: ["name": "Pwned"], old: ["name": "Real title"], date: "2030-01-01T00:00:00.000Z")
            let complete = WebhookBodies.body(
                type: "updateCard", actionID: "forged-complete-\(i)", cardID: card, listID: "Lvictim", boardID: "Bvictim",
                card: ["dueComplete": true], old: ["dueComplete": false], date: "2030-01-01T00:00:01.000Z")
            let delete = WebhookBodies.body(
                type: "deleteCard", actionID: "forged-delete-\(i)", cardID: card, listID: "Lvictim", boardID: "Bvictim",
                date: "2030-01-01T00:00:02.000Z")
            for body in [rename, complete, delete] {
                // Accepted (the signature is valid for the shared secret), but only as something to confirm with Trello.
                let response = try await stack.postWebhook(path: path, body: body, secret: secret)
                #expect(response.status == .ok, "\(path): \(response.body)")
                forged += 1
            }
        }
        // The victim's own URL with the attacker's token (or any other) is no account's.
        let wrongToken = "/dailyroundup/webhook/trello/\(victim.account)/\(attackerToken)"
        let body = WebhookBodies.body(
            type: "updateCard", actionID: "forged-token", cardID: card, listID: "Lvictim", boardID: "Bvictim", card: ["name": "Pwned"])
        #expect(try await stack.postWebhook(path: wrongToken, body: body, secret: secret).status == .notFound)
        #expect(forged == 6)

        // Everything processed: the victim's apps see nothing new, and the card at Trello is as it was.
        try await stack.quiet()
        #expect(try await TestSupport.eventually { try await stack.streamLength() == 0 })
        let seen = try await victim.changes()
        #expect(seen.isEmpty, "\(seen)")
        #expect(stack.trello.cardValue(card)?["name"] == "Real title")

        // The real thing still arrives: an edit in Trello, delivered to the victim's own URL, trusted as it is.
        stack.trello.userUpdateCard(id: card, ["name": "Renamed in Trello"])
        try await stack.quiet()
        let after = try await victim.changes()
        #expect(after.count == 1 && after.first?["fields"]?["title"] == "Renamed in Trello" && after.first?["reminder_id"] == "R1", "\(after)")
        #expect(stack.trello.webhooks.filter { $0.idModel == "Lvictim" }.allSatisfy { $0.callbackURL == stack.publicURL + victimOwn })
        await stack.shutdown()
    }

    /// A webhook registered before callback tokens existed (its URL names only the account) is moved to the account's
    /// own URL by reconciliation, and deliveries keep flowing.
    @Test(arguments: StoreBackend.available) func reconciliationMovesAWebhookFromAnOlderCallbackURL(backend: StoreBackend) async throws {
        let stack = try await startStackWithAPI(backend)
        let s = try await SyncSetup.make(stack, list: "Lold", board: "Bold")
        let legacy = stack.publicURL + "/dailyroundup/webhook/trello/" + s.account
        stack.trello.state.withLockedValue { state in
            for id in Array(state.webhooks.keys) { state.webhooks[id]?.callbackURL = legacy }
        }
        let started = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/reconcile", token: s.token)
        #expect(started.status == .accepted, "\(started.body)")
        let job = try await s.wait(job: try #require(started.json["job_id"]?.stringValue))
        #expect(job["status"] == "completed", "\(job)")
        #expect(job["results"]?[0]?["summary"]?["webhooks_registered"] == .number(2), "\(job)")
        let own = stack.publicURL + (try await stack.webhookPath(account: s.account))
        #expect(stack.trello.webhooks.count == 2 && stack.trello.webhooks.allSatisfy { $0.callbackURL == own }, "\(stack.trello.webhooks)")
        let card = stack.trello.userCreateCard(listID: "Lold", name: "After the move")
        try await stack.quiet()
        #expect(try await s.changes().contains { $0["trello_card_id"] == .string(card) })
        await stack.shutdown()
    }

    /// A deleted account's webhooks that Trello still holds (the user revoked the token, so they could not be deleted
    /// there) are answered 410 Gone, which makes Trello delete them; an id that never was an account stays 404.
    @Test(arguments: StoreBackend.available) func deliveriesForADeletedAccountAre410SoTrelloDropsTheWebhook(backend: StoreBackend) async throws {
        let stack = try await startStackWithAPI(backend)
        let s = try await SyncSetup.make(stack, list: "Lgone", board: "Bgone")
        let own = try await stack.webhookPath(account: s.account)
        stack.trello.revokeToken("test-token")
        let deleted = try await stack.callAPI(.DELETE, "/dailyroundup/account", token: s.token)
        #expect((200..<300).contains(deleted.status.code), "\(deleted.status) \(deleted.body)")
        #expect(stack.trello.webhooks.count == 2, "the revoked token could not delete them at Trello")
        let body = WebhookBodies.body(
            type: "updateCard", actionID: "after-delete", cardID: "C1", listID: "Lgone", boardID: "Bgone", card: ["name": "x"])
        let gone = try await TestSupport.eventually(timeout: .seconds(5)) {
            try await stack.postWebhook(path: own, body: body, secret: stack.trello.webhookSecret).status == .gone
        }
        #expect(gone)
        let response = try await stack.postWebhook(path: own, body: body, secret: stack.trello.webhookSecret)
        #expect(response.json["error"]?["code"]?.stringValue == "account_deleted", "\(response.body)")
        let never = "/dailyroundup/webhook/trello/\(UUID().uuidString.lowercased())"
        #expect(try await stack.postWebhook(path: never, body: body, secret: stack.trello.webhookSecret).status == .notFound)
        #expect(try await stack.streamLength() == 0)
        await stack.shutdown()
    }
}
