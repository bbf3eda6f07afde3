import Foundation
import Logging
import Metrics
import NIOConcurrencyHelpers
import RoundupCore
import RoundupStore
import RoundupStreams
import RoundupTrello
import ServiceLifecycle

extension SyncEngine {
    /// A `migrate_links` job (`POST /dailyroundup/lists/{id}/migrate-links`): every open card of the list that the list
    /// syncs gets its link attachments appended to its description (`LinkNotes`, `name: url` lines), then those
    /// attachments are deleted; uploads stay. One result per card that held links. It runs under the account's job lease
    /// (no sync job writes a description it is rewriting), through the same Trello client and shared rate windows as
    /// every other job.
    ///
    /// The pages of cards only say which cards hold links: each such card is read again just before its description is
    /// written, and the links are appended to the description it holds then (a person's edit in Trello since the page was
    /// read is kept). An attachment is deleted only once Trello's answer to that write (or the read, when nothing had to
    /// be written) shows the description holding its link exactly (`LinkNotes.holds`). Links that would take the
    /// description over Trello's 16,384 characters stay attachments, and the card's result says so (`reason`,
    /// `links_kept`).
    ///
    /// Resuming is by content, not by position: a card whose links are gone is passed over, and a link its description
    /// holds already is not appended again. So a worker that took the job over from a killed one, a second run, or a
    /// card half done (its description written, its attachments not yet deleted) writes nothing twice; a second run
    /// over migrated cards writes nothing at all.
    ///
    /// Every value written is fingerprinted first (`EchoFingerprints`), as a sync's writes are, so the webhooks of these
    /// writes are our own echo, never a Trello edit; the apps get each card's new notes and attachments as one ordinary
    /// update, dated when the card was read again (a person's edit in Trello after that read still wins).
    func runMigrateLinks(_ job: SyncJob, holder: String, state: inout JobState, lost: NIOLockedValueBox<Bool>) async -> RunOutcome {
        var processed = job.processed
        return await walkListJob(job, state: &state, lost: lost, failure: "moving the links failed") { list, priority, page, state in
            for (cardID, card) in page.cards {
                guard !LinkNotes.links(ofCard: card).isEmpty else { continue }
                if Task.isShuttingDownGracefully { return .interrupted }
                if lost.withLockedValue({ $0 }) { return .lost }
                let retried = await withRetries(lost: lost, log: "moving a card's links will be retried", ["card": "\(cardID)"]) {
                    try await moveLinks(cardID: cardID, list: list, priority: priority, state: &state)
                }
                let result: SyncItemResult
                switch retried {
                case .done(let moved?): result = moved
                case .done(nil): continue  // its links were removed in Trello since the page was read
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

    /// Moves one card's links, from the card as Trello holds it now; nil when it holds none any more.
    private func moveLinks(cardID: String, list: SyncListRecord, priority: PriorityField?, state: inout JobState) async throws -> SyncItemResult? {
        func skipped(_ reason: String) -> SyncItemResult {
            var result = SyncItemResult(reminderID: nil, op: .update, status: .skipped, trelloCardID: cardID)
            result.reason = reason
            return result
        }
        let gone = "the card \(cardID) was deleted, archived or moved out of the list in Trello"
        let readAt = Date()
        guard let card = try await trello.card(id: cardID, credentials: state.credentials), card["closed"]?.boolValue != true,
            card["idList"]?.stringValue == list.trelloListID, list.settings.filter.admits(CardFacts(card: card))
        else { return skipped(gone) }
        let links = LinkNotes.links(ofCard: card)
        guard !links.isEmpty else { return nil }

        let account = list.accountID
        func mark(_ field: SyncField, _ value: JSONValue) -> String {
            echo.fieldKey(account: account, card: cardID, field: field.rawValue, value: value)
        }
        func marks(_ attachments: [JSONValue]) -> [String] {
            let url = CardMapper.fields(fromCard: ["attachments": .array(attachments)])[SyncField.url] ?? .null
            return [mark(.attachments, CardMapper.attachments(attachments)), mark(.url, url)]
        }
        // The fingerprints of the card's final values, cleared once the store has them; those of the states the
        // attachments pass through are left to expire (a read of the card taken mid-way may be checked late).
        var finals: [String] = []

        let notes = card["desc"]?.stringValue ?? ""
        let placement = LinkNotes.placing(links.map(\.link), in: notes)
        var held = notes
        if placement.notes != notes {
            finals.append(mark(.notes, .string(placement.notes)))
            try await echo.mark(finals)
            guard
                let updated = try await trello.updateCard(id: cardID, attributes: ["desc": .string(placement.notes)], credentials: state.credentials)
            else { return skipped(gone) }
            // What Trello's answer shows the description holding (read again if the answer leaves it out).
            if let desc = updated["desc"]?.stringValue {
                held = desc
            } else {
                guard let read = try await trello.card(id: cardID, credentials: state.credentials) else { return skipped(gone) }
                held = read["desc"]?.stringValue ?? ""
            }
            if held != placement.notes {
                let other = mark(.notes, .string(held))
                try await echo.mark([other])
                finals.append(other)
            }
        }

        var attachments = card["attachments"]?.arrayValue ?? []
        var moved = 0
        var unconfirmed = 0
        for (id, link) in links {
            guard LinkNotes.holds(link, in: held) else {
                if !placement.left.contains(link) { unconfirmed += 1 }
                continue
            }
            guard let index = attachments.firstIndex(where: { $0["id"]?.stringValue == id }) else { continue }
            attachments.remove(at: index)
            try await echo.mark(marks(attachments))
            try await trello.deleteAttachment(cardID: cardID, attachmentID: id, credentials: state.credentials)
            moved += 1
        }
        let notesWritten = placement.notes != notes
        let kept = links.count - moved

        var reasons: [String] = []
        let left = placement.left.count
        if left > 0 {
            reasons.append(
                "\(left) link\(left == 1 ? "" : "s") stay\(left == 1 ? "s" : "") attached: with \(left == 1 ? "it" : "them") the description would be over Trello's limit of \(LinkNotes.descriptionLimit) characters"
            )
        }
        if unconfirmed > 0 {
            reasons.append(
                "\(unconfirmed) link\(unconfirmed == 1 ? "" : "s") stay\(unconfirmed == 1 ? "s" : "") attached: Trello's answer does not show the description holding \(unconfirmed == 1 ? "it" : "them")"
            )
        }
        guard notesWritten || moved > 0 else { return skipped(reasons.joined(separator: "; ")) }

        finals += marks(attachments)
        var now = card
        now["desc"] = .string(held)
        now["attachments"] = .array(attachments)
        let observation = CardObservation(
            accountID: account, syncListID: list.id, cardID: cardID, actionID: nil, actionDate: readAt,
            kind: .fields(CardMapper.fields(fromCard: now, priority: priority), full: true))
        if try await store.apply([observation]).written > 0 {
            await announceChanges(account: account, excludeDevice: nil, reason: .sync)
        }
        await echo.clear(finals)
        var result = SyncItemResult(reminderID: nil, op: .update, status: .ok, trelloCardID: cardID)
        result.summary = ["links_moved": .number(Double(moved)), "notes_written": .bool(notesWritten)]
        if kept > 0 {
            result.summary?["links_kept"] = .number(Double(kept))
            result.reason = reasons.joined(separator: "; ")
        }
        return result
    }
}
