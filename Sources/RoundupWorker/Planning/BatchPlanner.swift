import Foundation
import RoundupCore
import RoundupStore
import RoundupStreams

/// The webhook batch planner: which cards a batch must read from Trello, then the observations each entry makes once
/// Trello has answered. Synchronous and without I/O: `WebhookProcessor.process` asks it between the store's lookup
/// (`context`), Trello's reads and the store's write (`BatchPlannerTests` runs it without Trello or a database).
///
/// Both walks go through the batch in order, as processing the entries one by one would: each entry is planned against
/// its cards as the entries before it left them (`CardView`). Up to a card's first read its view is exact; from then on
/// that one read serves every later event of the card.
struct BatchPlanner {
    typealias Entry = Delivered<WebhookReading>
    typealias Fetched = [AccountScoped: Result<WebhookProcessor.FetchedCard?, TrelloFetchError>]

    /// What the store knows of the batch's accounts, cards, lists and boards.
    var context: BatchContext

    enum Step {
        case apply(CardObservation)
        /// Read the card from Trello. In no synced list (archived, gone, moved away), it left `knownLists`, the lists it
        /// may be live in. `trelloList`: the Trello list the payload names (many reads of one list become one read of
        /// the list: `fetchCards`).
        case fetch(account: String, cardID: String, boardID: String?, knownLists: [String], trelloList: String?)
    }

    /// A card as processing the batch's earlier entries one at a time would leave it, as far as the planner can tell
    /// without the store. `known` is the task as read before the batch. Once an entry of the batch changes the card's
    /// membership (removed, archived, deleted, created, moved, back from the archive), the store's own rules decide
    /// whether that took (an action delivered late, an echo of our own write), so the card is `unsettled`: every later
    /// event of it in the batch is resolved from the card as Trello has it, never applied on the strength of its payload.
    enum CardView {
        case known(TaskState?)
        /// The sync lists the card may be live in now: one of them at most, or none.
        case unsettled(Set<String>)

        /// The view once the store has applied `o`, whichever way `ChangeApplier`'s guards go.
        func after(_ o: CardObservation) -> CardView {
            switch self {
            case .known(let task):
                let liveIn = task.flatMap { $0.deleted ? nil : $0.syncListID }
                let removal: Bool
                if case .removed = o.kind { removal = true } else { removal = false }
                if liveIn == o.syncListID {
                    return removal ? .unsettled([o.syncListID]) : self  // fields of a card live in that list leave it there
                }
                if removal { return self }  // not live in that list: the store ignores the removal
                return .unsettled(Set([o.syncListID] + (liveIn.map { [$0] } ?? [])))
            case .unsettled(var lists):
                if case .fields = o.kind { lists.insert(o.syncListID) }
                return .unsettled(lists)
            }
        }
    }

    /// The cards to read from Trello, each with what its read needs.
    func reads(_ entries: [Entry]) -> [AccountScoped: FetchWant] {
        var fetches: [AccountScoped: FetchWant] = [:]
        var views: [AccountScoped: CardView] = [:]
        var latest: [AccountScoped: Date] = [:]
        for p in entries {
            var applies: [CardObservation] = []
            for event in p.events {
                let key = AccountScoped(p.account, event.cardID)
                latest[key] = max(latest[key] ?? .distantPast, p.date)
                guard fetches[key] == nil else { continue }
                for step in steps(for: event, of: p, view: views[key] ?? .known(context.tasks[key])) {
                    switch step {
                    case .apply(let observation): applies.append(observation)
                    case .fetch(_, _, let boardID, _, let list): fetches[key] = FetchWant(board: boardID, list: list, order: fetches.count)
                    }
                }
            }
            settle(applies, into: &views)
        }
        for key in Array(fetches.keys) { fetches[key]?.latest = latest[key] ?? .distantPast }
        return fetches
    }

    /// What the batch comes to once its cards were read.
    struct Observed {
        var observations: [CardObservation] = []
        /// Entries whose observations are in `observations`, and entries that make none (both done once written).
        var applied: [String] = []
        var dropped: [String] = []
        /// Entries that wait: a read of their card failed, or an earlier event of the card or the account waits.
        var retry: [(id: String, error: EntryError)] = []
        /// Entries left waiting for their account's Trello rate limit, and how long the token must wait.
        var throttled: [String: Duration] = [:]
    }

    /// The observations of every entry that has all it needs, with what Trello said (`fetched`). The events of a card
    /// that come after one of its events failed wait with it (in the stream), and so do an account's entries after one
    /// that waits for its Trello rate limit.
    func observations(_ entries: [Entry], fetched: Fetched) -> Observed {
        var observed = Observed()
        var failedCards: [AccountScoped: EntryError] = [:]
        // An account whose token is throttled: its entries from the first one that waits on, in their order.
        var throttledAccounts: [String: Duration] = [:]
        var views: [AccountScoped: CardView] = [:]
        for p in entries {
            let keys = Set(p.events.map { AccountScoped(p.account, $0.cardID) })
            if let wait = throttledAccounts[p.account] {
                observed.retry.append((p.id, EntryError(.trelloThrottled, "an earlier event of the account waits for its Trello rate limit")))
                observed.throttled[p.id] = wait
                continue
            }
            if let earlier = keys.lazy.compactMap({ failedCards[$0] }).first {
                observed.retry.append((p.id, EntryError(earlier.failure, "an earlier event of the card failed: \(earlier.message)")))
                continue
            }
            switch observe(p, views: views, fetched: fetched) {
            case .failure(let failure, let wait):
                observed.retry.append((p.id, failure))
                for key in keys { failedCards[key] = failure }
                if let wait {
                    observed.throttled[p.id] = wait
                    throttledAccounts[p.account] = max(throttledAccounts[p.account] ?? .zero, wait)
                }
            case .success(let made):
                settle(made, into: &views)
                if made.isEmpty {
                    observed.dropped.append(p.id)
                } else {
                    observed.observations.append(contentsOf: made)
                    observed.applied.append(p.id)
                }
            }
        }
        return observed
    }

    enum EntryObservations {
        case success([CardObservation])
        /// `wait`: the entry waits for its account's Trello rate limit this long.
        case failure(EntryError, wait: Duration?)
    }

    /// The observations one entry makes, its cards seen as `views` (and the store's tasks) say.
    private func observe(_ p: Entry, views: [AccountScoped: CardView], fetched: Fetched) -> EntryObservations {
        var made: [CardObservation] = []
        var failure: EntryError?
        var wait: Duration?
        for event in p.events {
            let key = AccountScoped(p.account, event.cardID)
            for step in steps(for: event, of: p, view: views[key] ?? .known(context.tasks[key])) {
                switch step {
                case .apply(let observation):
                    made.append(observation)
                case .fetch(let account, let cardID, _, let knownLists, _):
                    switch fetched[AccountScoped(account, cardID)] {
                    case .failure(let error):
                        failure = EntryError(error.failure, error.message)
                        if error.failure == .trelloThrottled { wait = max(wait ?? .zero, error.wait ?? .seconds(1)) }
                    case .success(let result):
                        made += observations(of: result, account: account, cardID: cardID, knownLists: knownLists, entry: p)
                    case nil:
                        failure = EntryError(.trelloTransient, "card \(cardID) was not fetched")
                    }
                }
            }
        }
        if let failure { return .failure(failure, wait: wait) }
        return .success(made)
    }

    /// A card as Trello returned it: in a synced list, open, and matching the list's filter, it is observed there whole;
    /// else it is out of every list it was in.
    private func observations(
        of card: WebhookProcessor.FetchedCard?, account: String, cardID: String, knownLists: [String], entry p: Entry
    ) -> [CardObservation] {
        if let card, let list = card.listID.flatMap({ context.lists[AccountScoped(account, $0)] }), !card.closed,
            list.settings.filter.admits(card.facts)
        {
            return [
                CardObservation(
                    accountID: account, syncListID: list.id, cardID: cardID, actionID: p.actionID, actionDate: p.date,
                    kind: .fields(card.fields, full: true))
            ]
        }
        return knownLists.map {
            CardObservation(accountID: account, syncListID: $0, cardID: cardID, actionID: p.actionID, actionDate: p.date, kind: .removed)
        }
    }

    /// Each card's view once the store has applied `observations`.
    private func settle(_ observations: [CardObservation], into views: inout [AccountScoped: CardView]) {
        for o in observations {
            let key = AccountScoped(o.accountID, o.cardID)
            views[key] = (views[key] ?? .known(context.tasks[key])).after(o)
        }
    }

    /// What `event` of `p` needs, the card seen as `view`: nothing when it concerns no synced list.
    func steps(for event: CardEvent, of p: Entry, view: CardView) -> [Step] {
        let list = event.listID.flatMap { context.lists[AccountScoped(p.account, $0)] }
        let board = event.boardID ?? p.boardID
        func observation(_ syncListID: String, _ kind: CardObservation.Kind) -> Step {
            var o = CardObservation(
                accountID: p.account, syncListID: syncListID, cardID: event.cardID, actionID: p.actionID, actionDate: p.date, kind: kind)
            o.previous = event.previous
            return .apply(o)
        }
        switch view {
        case .known(let task):
            let liveTask = task.flatMap { $0.deleted ? nil : $0 }
            let knownLists = liveTask.map { [$0.syncListID] } ?? []
            switch event.kind {
            case .removed:
                guard let syncListID = list?.id ?? (event.listID == nil ? liveTask?.syncListID : nil) else { return [] }
                return [observation(syncListID, .removed)]
            case .fields(let fields):
                // The list the payload names, or (when it names none) the one the card is known in.
                let target = list?.id ?? (event.listID == nil ? liveTask?.syncListID : nil)
                // A list that filters its cards decides from the whole card: this edit may take it in or out.
                if let target, let liveTask, liveTask.syncListID == target, !liveTask.listFiltered {
                    return [observation(target, .fields(fields, full: false))]
                }
                // A card we have not seen yet (or not in this list): read it whole.
                guard list != nil || liveTask != nil else { return [] }
                return [.fetch(account: p.account, cardID: event.cardID, boardID: board, knownLists: knownLists, trelloList: event.listID)]
            case .fetch:
                let boardSynced = board.map { context.boards.contains(AccountScoped(p.account, $0)) } ?? false
                guard list != nil || liveTask != nil || (event.listID == nil && boardSynced) else { return [] }
                return [.fetch(account: p.account, cardID: event.cardID, boardID: board, knownLists: knownLists, trelloList: event.listID)]
            case .membersChanged:
                // Only a list that filters by member cares who is on the card.
                let byMember = list.map { !$0.settings.filter.members.isEmpty } ?? (liveTask?.listFiltered ?? false)
                guard byMember else { return [] }
                return [.fetch(account: p.account, cardID: event.cardID, boardID: board, knownLists: knownLists, trelloList: event.listID)]
            }
        case .unsettled(let lists):
            switch event.kind {
            case .removed:
                if let list { return [observation(list.id, .removed)] }
                guard event.listID == nil else { return [] }
                return lists.sorted().map { observation($0, .removed) }  // the store removes it from the one it is live in
            case .fields, .fetch, .membersChanged:
                return [.fetch(account: p.account, cardID: event.cardID, boardID: board, knownLists: lists.sorted(), trelloList: event.listID)]
            }
        }
    }
}

/// What a card's read needs: its board (for the Priority field) and the list the payload named.
struct FetchWant: Sendable {
    var board: String?
    var list: String?
    /// The latest date of the card's events in the batch: a read must hold all of them.
    var latest: Date = .distantPast
    /// Its place among the batch's reads: cards are read in the order of their first entry, so an account whose
    /// token runs out spends what it has on its earliest entries (the ones its order lets through).
    var order = 0
}
