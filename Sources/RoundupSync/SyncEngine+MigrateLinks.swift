import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import RoundupCore
import RoundupStore
import RoundupTrello
import ServiceLifecycle

extension SyncEngine {
    /// A `migrate_links` job (`POST /dailyroundup/lists/{id}/migrate-links`): every open card of the list that the list
    /// syncs gets its link attachments appended to its description (`LinkNotes`), then those attachments are deleted;
    /// uploads stay. One result per card that held links. It runs under the account's job lease (no sync job writes a
    /// description it is rewriting), through the same Trello client and shared rate windows as every other job.
    ///
    /// Resuming is by content, not by position: a card whose links are gone is passed over, and a link its description
    /// holds already is not appended again. So a worker that took the job over from a killed one, a second run, or a
    /// card half done (its description written, its attachments not yet deleted) writes nothing twice; a second run
    /// over migrated cards writes nothing at all.
    ///
    /// The apps get each card's new notes and attachments as an ordinary update, dated when the card was read (a
    /// person's edit in Trello after that read still wins); the webhooks of these writes then find nothing new.
    func runMigrateLinks(_ job: SyncJob, holder: String, state: inout JobState, lost: NIOLockedValueBox<Bool>) async -> RunOutcome {
        var processed = job.processed
        return await walkListJob(job, state: &state, lost: lost, failure: "moving the links failed") { list, priority, page, state in
            for (cardID, card) in page.cards {
                let links = LinkNotes.links(ofCard: card)
                guard !links.isEmpty else { continue }
                if Task.isShuttingDownGracefully { return .interrupted }
                if lost.withLockedValue({ $0 }) { return .lost }
                let retried = await withRetries(lost: lost, log: "moving a card's links will be retried", ["card": "\(cardID)"]) {
                    try await moveLinks(card, cardID: cardID, links: links, readAt: page.readAt, list: list, priority: priority, state: &state)
                }
                let result: SyncItemResult
                switch retried {
                case .done(let moved): result = moved
                case .failed(let message):
                    result = SyncItemResult(reminderID: nil, op: .update, status: .error, trelloCardID: cardID, error: message)
                case .stopped: return lost.withLockedValue({ $0 }) ? .lost : .interrupted
                }
                Counter(label: "roundup_sync_items_total", dimensions: [("op", "migrate_links"), ("status", result.status.rawValue)]).increment()
                guard try await appendResult(result, job: job, holder: holder, processed: &processed) else { return .lost }
            }
            return nil
        }
    }

    private func moveLinks(
        _ card: [String: JSONValue], cardID: String, links: [(id: String, link: LinkNotes.Link)], readAt: Date, list: SyncListRecord,
        priority: PriorityField?, state: inout JobState
    ) async throws -> SyncItemResult {
        var now = card
        let notes = card["desc"]?.stringValue ?? ""
        let appended = LinkNotes.appending(links.map(\.link), to: notes)
        if appended != notes {
            guard try await trello.updateCard(id: cardID, attributes: ["desc": .string(appended)], credentials: state.credentials) != nil else {
                var gone = SyncItemResult(reminderID: nil, op: .update, status: .skipped, trelloCardID: cardID)
                gone.reason = "the card \(cardID) no longer exists in Trello"
                return gone
            }
            now["desc"] = .string(appended)
        }
        for link in links {
            try await trello.deleteAttachment(cardID: cardID, attachmentID: link.id, credentials: state.credentials)
        }
        let deleted = Set(links.map(\.id))
        now["attachments"] = .array((card["attachments"]?.arrayValue ?? []).filter { !deleted.contains($0["id"]?.stringValue ?? "") })
        let observation = CardObservation(
            accountID: list.accountID, syncListID: list.id, cardID: cardID, actionID: nil, actionDate: readAt,
            kind: .fields(CardMapper.fields(fromCard: now, priority: priority), full: true))
        if try await store.apply([observation]).written > 0 {
            await announceChanges(account: list.accountID, excludeDevice: nil, reason: .sync)
        }
        var result = SyncItemResult(reminderID: nil, op: .update, status: .ok, trelloCardID: cardID)
        result.summary = ["links_moved": .number(Double(links.count)), "notes_written": .bool(appended != notes)]
        return result
    }
}
