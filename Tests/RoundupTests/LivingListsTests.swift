import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import RoundupCore
import RoundupRedis
import RoundupRuntime
import RoundupStreams
import RoundupTesting
import Testing

/// Lists that live, through the real processes and the fake Trello: a list renamed in Trello is
/// renamed for the apps, with a push; archived, its pairing pauses (shown to the apps and in `roundupctl lists`, no
/// reminder deleted, no job written to it); restored, it resumes with a reconciliation.
@Suite(.serialized) struct LivingListsTests {
    func list(_ s: SyncSetup) async throws -> JSONValue {
        let response = try await s.stack.callAPI(.GET, "/dailyroundup/lists", token: s.token)
        #expect(response.status == .ok, "\(response.body)")
        return response.json["lists"]?.arrayValue?.first { $0["sync_list_id"]?.stringValue == s.listID } ?? .null
    }

    func listChangedPushes(_ stack: Stack) async throws -> Int {
        try await stack.redis.send("XRANGE", RedisArgument(stack.keys.pushStream), "-", "+").streamEntries
            .filter { $0.fields["reason"] == Array("list_changed".utf8) }.count
    }

    @Test(arguments: StoreBackend.available) func aListRenamedArchivedAndRestoredInTrello(backend: StoreBackend) async throws {
        let stack = try await SyncJobTests().startStack(backend)
        defer { Task { await stack.shutdown() } }
        let s = try await SyncSetup.make(stack, list: "Lliving", board: "Bliving", policy: "lww")
        let card = stack.trello.userCreateCard(listID: "Lliving", name: "Water the plants")
        try await stack.quiet()
        try await s.ack(try await s.changes(), reminders: [card: "R-plants"])
        let first = try await list(s)
        #expect(first["name"] == "Errands" && first["archived"] == false, "\(first)")

        // Renamed in Trello: the list has Trello's new name for the apps, and the devices are woken.
        stack.trello.userUpdateList(id: "Lliving", name: "Garden")
        let renamed = try await TestSupport.eventually(timeout: .seconds(30)) { try await list(s)["name"] == "Garden" }
        #expect(renamed)
        #expect(try await listChangedPushes(stack) == 1)

        // Archived: paused, shown; no reminder deleted; an edit from the apps writes nothing to Trello.
        stack.trello.userUpdateList(id: "Lliving", closed: true)
        let paused = try await TestSupport.eventually(timeout: .seconds(30)) { try await list(s)["archived"] == true }
        #expect(paused)
        let archived = try await list(s)
        let pushes = try await listChangedPushes(stack)
        #expect(archived["archived_at"]?.stringValue != nil && pushes == 2, "\(archived) \(pushes)")
        #expect(try await s.changes().isEmpty, "no change for the apps: the cards stay")
        let job = try await s.sync([s.change("update", reminder: "R-plants", fields: ["title": "Water the roses"], changed: ["title"])])
        #expect(job["results"]?[0]?["status"] == "skipped" && job["results"]?[0]?["reason"]?.stringValue?.contains("archived") == true, "\(job)")
        #expect(stack.trello.state.withLockedValue { $0.cards[card]?["name"] } == "Water the plants")
        let imported = try await stack.callAPI(.POST, "/dailyroundup/lists/\(s.listID)/import", token: s.token)
        #expect(imported.status == .conflict && imported.json["error"]?["message"]?.stringValue?.contains("archived") == true, "\(imported.body)")
        let ctl = try await RoundupCtlTests().run(stack, ["lists"])
        #expect(ctl.code == 0 && ctl.output.contains("PAUSED: trello list archived"), "\(ctl.output)")

        // Restored: resumed and reconciled; an edit made in Trello meanwhile reaches the apps, and the apps' next edit
        // reaches the card.
        stack.trello.userUpdateCard(id: card, ["desc": "twice a week"])
        stack.trello.userUpdateList(id: "Lliving", closed: false)
        let resumed = try await TestSupport.eventually(timeout: .seconds(30)) { try await list(s)["archived"] == false }
        #expect(resumed)
        try await stack.quiet()
        let after = try await s.changes()
        #expect(after.contains { $0["fields"]?["notes"] == "twice a week" }, "\(after)")
        let again = try await s.sync([s.change("update", reminder: "R-plants", fields: ["title": "Water the roses"], changed: ["title"])])
        #expect(again["results"]?[0]?["status"] == "ok", "\(again)")
        #expect(stack.trello.state.withLockedValue { $0.cards[card]?["name"] } == "Water the roses")
    }
}
