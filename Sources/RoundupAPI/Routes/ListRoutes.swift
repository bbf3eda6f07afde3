import Hummingbird
import Logging
import RoundupCore
import RoundupJobs
import RoundupStore
import RoundupTrello

/// `/dailyroundup/lists`: pairing Trello lists, and the jobs that import or reconcile one.
struct ListRoutes {
    let store: any ListRepository & AccountRepository
    /// Pairing and unpairing; who `me` is, in a filter's members.
    let pairing: ListPairing
    let jobs: JobAnswers
    let logger: Logger

    var collection: RouteCollection<AuthenticatedContext> {
        let routes = RouteCollection(context: AuthenticatedContext.self)
        routes.get { _, context in try await list(context.account) }
        routes.post { request, context in try await create(context.account, request, context) }
        routes.get("{id}") { _, context in try await get(context.account, context.parameters.require("id")) }
        routes.get("{id}/cards") { request, context in try await cards(context.account, context.parameters.require("id"), request) }
        routes.put("{id}") { request, context in try await update(context.account, context.parameters.require("id"), request, context) }
        routes.delete("{id}") { _, context in try await delete(context.account, context.parameters.require("id")) }
        routes.post("{id}/import") { _, context in try await importCards(context.account, context.parameters.require("id")) }
        routes.post("{id}/reconcile") { _, context in try await reconcile(context.account, context.parameters.require("id")) }
        routes.post("{id}/migrate-links") { _, context in try await migrateLinks(context.account, context.parameters.require("id")) }
        return routes
    }

    func list(_ account: String) async throws -> SyncListPage {
        SyncListPage(lists: try await store.syncLists(accountID: account).map(SyncList.init))
    }

    /// `GET /dailyroundup/lists/{id}`: the list, with its board's vocabulary (`ListPairing.boardVocabulary`: two Trello
    /// reads, the labels and the Priority field, which is stored again when it changed). The list is answered whatever
    /// Trello says: when it cannot be asked (no credentials, refused, unreachable), `labels` is null, the options are
    /// the stored ones, and `vocabulary_error` says why.
    func get(_ account: String, _ id: String) async throws -> SyncList {
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        var answer = SyncList(list)
        func options(_ field: PriorityField?) -> [JSONValue] {
            (field?.ordered ?? []).map { option in
                .object(["id": .string(option.id), "text": .string(option.text), "level": .number(Double(field?.level(of: option.id) ?? 0))])
            }
        }
        do {
            guard let details = try await store.accountDetails(id: account), let credentials = API.credentials(details) else {
                answer.vocabularyError = "the account has no Trello credentials: set trello_api_key and trello_token"
                answer.priorityOptions = options(try await store.priorityField(accountID: account, boardID: list.trelloBoardID))
                return answer
            }
            let vocabulary = try await pairing.boardVocabulary(accountID: account, boardID: list.trelloBoardID, credentials: credentials)
            answer.labels = vocabulary.labels.map { label in
                .object(["id": label["id"] ?? .null, "name": label["name"] ?? "", "color": label["color"] ?? .null])
            }
            answer.priorityOptions = options(vocabulary.priority)
        } catch let error as TrelloError {
            logger.info("board vocabulary unavailable", metadata: ["account": "\(account)", "list": "\(id)", "error": "\(error.message)"])
            answer.vocabularyError = "Trello could not say the board's labels and Priority options: \(error.message)"
            answer.priorityOptions = options(try await store.priorityField(accountID: account, boardID: list.trelloBoardID))
        }
        return answer
    }

    /// The most bytes of stored values one page of `cards` holds (past it, the page ends early: a page's memory is
    /// bounded whatever its cards hold).
    static let cardPageBytes = 2 << 20

    /// `GET /dailyroundup/lists/{id}/cards`: the cards the server has live in the list, from the store (no Trello
    /// request), in pages of `limit` (1–500, default 200) from `cursor` (a page's `next_cursor`). What a new or
    /// reinstalled device reads to learn which reminder is which card and every field as last synced. Every request
    /// counts against the account's rate limit.
    func cards(_ account: String, _ id: String, _ request: Request) async throws -> ListCardPage {
        let query = request.uri.queryParameters
        var after: Int64 = 0
        if let text = query["cursor"] {
            guard let value = Int64(String(text)), value >= 0 else {
                throw APIError.badRequest("cursor must be a next_cursor this endpoint answered")
            }
            after = value
        }
        let limit = try pageLimit(query["limit"], standard: 200, most: 500)
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        // One more than the page holds says whether there are more.
        let records = try await store.listCards(accountID: account, syncListID: id, after: after, limit: limit + 1)
        var cards: [ListCard] = []
        var bytes = 0
        var last: Int64?
        for record in records.prefix(limit) {
            if !cards.isEmpty, bytes + (record.values?.utf8.count ?? 0) > Self.cardPageBytes { break }
            cards.append(ListCard(record, settings: list.settings))
            bytes += record.values?.utf8.count ?? 0
            last = record.id
        }
        let more = cards.count < records.count
        return ListCardPage(syncListID: id, cards: cards, nextCursor: more ? last.map(String.init) : nil)
    }

    /// `POST /dailyroundup/lists`: pairs a Trello list (`ListPairing`: checked at Trello to be on the board named with
    /// it, stored, its webhooks registered, its routes published; nothing kept on failure). 409 until the account has
    /// its Trello credentials; 422 when Trello has no such list, or has it on another board or archived.
    func create(_ account: String, _ request: Request, _ context: AuthenticatedContext) async throws -> EditedResponse<SyncList> {
        let body = try SyncListCreate(try await JSONBody.read(request, context: context))
        guard let details = try await store.accountDetails(id: account) else { throw APIError.unauthorized("the account is gone") }
        let missing = [
            details.trelloAPIKey == nil ? "trello_api_key" : nil, details.trelloToken == nil ? "trello_token" : nil,
            details.trelloWebhookSecret == nil ? "trello_webhook_secret" : nil,
        ].compactMap { $0 }
        guard missing.isEmpty, let credentials = API.credentials(details) else {
            throw APIError.conflict("set \(missing.joined(separator: ", ")) with PUT /dailyroundup/account first")
        }
        let settings = try await resolveMe(body.settings, credentials: credentials)
        do {
            let list = try await pairing.pair(
                account: account, name: body.name, trelloBoardID: body.trelloBoardID, trelloListID: body.trelloListID, settings: settings,
                credentials: credentials)
            return EditedResponse(status: .created, response: SyncList(list))
        } catch {
            switch error {
            case .accountGone: throw APIError.unauthorized("the account is gone")
            case .alreadyPaired(let listID): throw APIError.conflict("trello list \(listID) is already synced")
            case .listNotFound(let listID):
                throw APIError.unprocessable("Trello has no list \(listID) that the account's trello_token can see (trello_list_id)")
            case .listNotOnBoard(let listID, let boardID, let actual):
                throw APIError.unprocessable(
                    "trello list \(listID) is on board \(actual), not on trello_board_id \(boardID): send the board the list is on")
            case .listArchived(let listID): throw APIError.unprocessable("trello list \(listID) is archived in Trello: restore it first")
            case .unavailable(let reason): throw APIError.unavailable(reason)
            case .store(let error): throw error
            case .trello(let trelloError):
                // The app's ids or the account's credentials are wrong: the request's fault (422). Trello unreachable,
                // failing, or unable to reach our ingress (its HEAD check): not the app's (502), try again later.
                switch trelloError.kind {
                case .tokenRejected, .credentialsRejected:
                    throw APIError.unprocessable("Trello refused the account's trello_api_key or trello_token: \(trelloError.message)")
                case .notFound,
                    .refused where trelloError.status == 400:
                    throw APIError.unprocessable("Trello refused these ids: \(trelloError.message)")
                default:
                    throw APIError.badGateway("Trello refused the webhook: \(trelloError.message)")
                }
            }
        }
    }

    /// `PUT /dailyroundup/lists/{id}`: new settings, over the list's (a key left out keeps its value). The next event of
    /// the list obeys them; when they change which cards or fields sync, a reconciliation is queued, so cards that now
    /// match become creates and cards that no longer match become deletes without waiting for an edit of each.
    func update(_ account: String, _ id: String, _ request: Request, _ context: AuthenticatedContext) async throws -> SyncList {
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        var settings = try SyncListSettingsBody.read(try await JSONBody.read(request, context: context), over: list.settings)
        if settings.filter.members.contains("me") {
            guard let credentials = try await store.accountDetails(id: account).flatMap(API.credentials) else {
                throw APIError.conflict("set trello_api_key and trello_token with PUT /dailyroundup/account first: \"me\" names the token's member")
            }
            settings = try await resolveMe(settings, credentials: credentials)
        }
        guard settings != list.settings else { return SyncList(list) }
        guard let updated = try await store.updateSyncListSettings(accountID: account, id: id, settings: settings) else {
            throw APIError.notFound("no list \(id)")
        }
        logger.info("list settings changed", metadata: ["account": "\(account)", "sync_list": "\(id)"])
        if Self.changesWhatSyncs(from: list.settings, to: settings) {
            do {
                _ = try await reconcile(account, id)
            } catch {
                // Another job of the account runs: the scheduled reconciliation brings the list in line instead.
                logger.info("reconciliation after a settings change not queued", metadata: ["sync_list": "\(id)", "error": "\(error)"])
            }
        }
        return SyncList(updated)
    }

    /// Whether cards already in the apps may now be out of step: the filter, the direction, the pairing mode or the
    /// fields that flow to Reminders changed.
    static func changesWhatSyncs(from old: SyncSettings, to new: SyncSettings) -> Bool {
        old.filter != new.filter || old.direction != new.direction || old.initial != new.initial
            || SyncField.all.contains { old.syncsToReminders($0) != new.syncsToReminders($0) }
    }

    /// Puts the token's member in place of `me` among the filter's members.
    private func resolveMe(_ settings: SyncSettings, credentials: TrelloCredentials) async throws -> SyncSettings {
        guard settings.filter.members.contains("me") else { return settings }
        var resolved = settings
        do {
            let me = try await pairing.tokenMember(credentials)
            resolved.filter.members.remove("me")
            resolved.filter.members.insert(me)
        } catch let error as TrelloError {
            switch error.kind {
            case .tokenRejected, .credentialsRejected:
                throw APIError.unprocessable("Trello refused the account's trello_token, so \"me\" cannot be known: \(error.message)")
            default: throw APIError.badGateway("Trello could not say who \"me\" is: \(error.message)")
            }
        }
        return resolved
    }

    /// `DELETE /dailyroundup/lists/{id}`: unpairs the list (`ListPairing.unpair`).
    func delete(_ account: String, _ id: String) async throws -> HTTPResponse.Status {
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        let credentials = try await store.accountDetails(id: account).flatMap(API.credentials)
        try await pairing.unpair(list, credentials: credentials)
        return .noContent
    }

    /// `POST /dailyroundup/lists/{id}/import`: a job that emits a create for every open card of the list.
    func importCards(_ account: String, _ id: String) async throws -> EditedResponse<JobStarted> {
        try await submitListJob(account, id, kind: .import, total: 0)
    }

    /// `POST /dailyroundup/lists/{id}/reconcile`: a job that compares the list with Trello now (and repairs its webhooks).
    func reconcile(_ account: String, _ id: String) async throws -> EditedResponse<JobStarted> {
        try await submitListJob(account, id, kind: .reconcile, total: 1)
    }

    /// `POST /dailyroundup/lists/{id}/migrate-links`: a job that appends every card's link attachments to its description,
    /// then deletes them (uploads stay); a second run writes nothing.
    func migrateLinks(_ account: String, _ id: String) async throws -> EditedResponse<JobStarted> {
        try await submitListJob(account, id, kind: .migrateLinks, total: 0)
    }

    /// A job about one of the account's lists, queued for the workers.
    private func submitListJob(_ account: String, _ id: String, kind: JobKind, total: Int) async throws -> EditedResponse<JobStarted> {
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        // A paused list takes no job that writes or reads its cards; a reconciliation is how it notices a restore.
        if list.archived, kind != .reconcile {
            throw APIError.conflict("the Trello list of \(id) is archived: its sync is paused until the list is restored in Trello")
        }
        return try await jobs.queue { jobs in
            try await jobs.submit(accountID: account, kind: kind, payload: .object(["sync_list_id": .string(id)]), total: total)
        }
    }
}
