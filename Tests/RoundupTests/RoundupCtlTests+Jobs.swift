import Foundation
import NIOHTTP1
import RoundupCore
import RoundupTesting
import Testing

/// `roundupctl reconcile --wait` and `jobs show --watch` against a real worker: they follow the jobs to their end and
/// say how they ended.
extension RoundupCtlTests {
    @Test func reconcileWaitsForEveryListAndFailsWhenOneFails() async throws {
        let stack = try await Stack(store: .sqlite)
        defer { Task { await stack.shutdown() } }
        try await stack.startIngress()
        try await stack.startAPI(bootstrapToken: SyncSetup.bootstrap)
        try await stack.startWorker(name: "w1")
        stack.trello.addToken("token-of-second")
        let first = try await SyncSetup.make(stack, list: "Lrec1", board: "Brec")
        let second = try await SyncSetup.make(stack, list: "Lrec2", board: "Brec2", trelloToken: "token-of-second")
        stack.trello.setCard(FakeTrello.card(id: "rec-card", listID: "Lrec1", boardID: "Brec", name: "Reconciled"))
        try await stack.quiet()

        // Both lists: the command returns once both jobs ended, with their results.
        let waited = try await run(stack, ["reconcile", "--wait", "--json"])
        let jobs = try json(waited)["jobs"]?.arrayValue ?? []
        #expect(jobs.count == 2 && jobs.allSatisfy { $0["status"] == "completed" && $0["kind"] == "reconcile" }, "\(waited.output)")
        #expect(Set(jobs.compactMap { $0["account_id"]?.stringValue }) == [first.account, second.account])
        // The card the webhooks never told of came in with the reconciliation.
        #expect(try await first.changes().contains { $0["trello_card_id"] == "rec-card" })

        // The second account's token is revoked: its reconciliation fails, and so does the command, naming the job.
        stack.trello.revokeToken("token-of-second")
        let failed = try await run(stack, ["reconcile", "--wait"])
        #expect(failed.code == 1, "\(failed.output)")
        #expect(failed.output.contains("reconciled 1/2 list(s)") && failed.output.contains("FAIL"), "\(failed.output)")

        // jobs show --watch ends with the job; its last line is its end.
        let last = try #require(jobs.first?["job_id"]?.stringValue)
        let watched = try await run(stack, ["jobs", "show", last, "--watch", "0.2"])
        #expect(watched.code == 0 && watched.output.contains("completed"), "\(watched.output)")
        #expect(try await run(stack, ["jobs", "show", last, "--watch", "0"]).code == 2)
    }
}
