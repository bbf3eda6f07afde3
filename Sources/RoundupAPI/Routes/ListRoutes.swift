import Hummingbird
import Logging
import RoundupCore
import RoundupStore
import RoundupSync
import RoundupTrello

/// `/dailyroundup/lists`: pairing Trello lists, and the jobs that import or reconcile one.
struct ListRoutes {
    let api: API

    var collection: RouteCollection<APIRequestContext> {
        let routes = RouteCollection(context: APIRequestContext.self)
        routes.add(middleware: api.authentication)
        routes.get { _, context in try await list(context.requireAccount()) }
        routes.post { request, context in try await create(context.requireAccount(), request, context) }
        routes.get("{id}") { _, context in try await get(context.requireAccount(), context.parameters.require("id")) }
        routes.put("{id}") { request, context in try await update(context.requireAccount(), context.parameters.require("id"), request, context) }
        routes.delete("{id}") { _, context in try await delete(context.requireAccount(), context.parameters.require("id")) }
        routes.post("{id}/import") { _, context in try await importCards(context.requireAccount(), context.parameters.require("id")) }
        routes.post("{id}/reconcile") { _, context in try await reconcile(context.requireAccount(), context.parameters.require("id")) }
        routes.post("{id}/migrate-links") { _, context in try await migrateLinks(context.requireAccount(), context.parameters.require("id")) }
        return routes
    }

    func list(_ account: String) async throws -> SyncListPage {
        SyncListPage(lists: try await api.store.syncLists(accountID: account).map(SyncList.init))
    }

    func get(_ account: String, _ id: String) async throws -> SyncList {
        guard let list = try await api.store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        return SyncList(list)
    }

    /// Pairs a Trello list: stores it, registers the list and board webhooks (Trello checks the callback URL
    /// with HEAD first), then publishes the routes. Any failure removes what was made.
    func create(_ account: String, _ request: Request, _ context: APIRequestContext) async throws -> EditedResponse<SyncList> {
        let pairing = try SyncListCreate(try await JSONBody.read(request, context: context))
        let (store, name, boardID, listID) = (api.store, pairing.name, pairing.trelloBoardID, pairing.trelloListID)

        guard let details = try await store.accountDetails(id: account) else { throw APIError.unauthorized("the account is gone") }
        let missing = [
            details.trelloAPIKey == nil ? "trello_api_key" : nil, details.trelloToken == nil ? "trello_token" : nil,
            details.trelloWebhookSecret == nil ? "trello_webhook_secret" : nil,
        ].compactMap { $0 }
        guard missing.isEmpty, let credentials = API.credentials(details) else {
            throw APIError.conflict("set \(missing.joined(separator: ", ")) with PUT /dailyroundup/account first")
        }

        let settings = try await resolveMe(pairing.settings, credentials: credentials)
        let list: SyncListRecord
        do {
            list = try await store.createSyncList(accountID: account, name: name, trelloBoardID: boardID, trelloListID: listID, settings: settings)
        } catch StoreError.duplicateList {
            throw APIError.conflict("trello list \(listID) is already synced")
        }
        // The account's own callback URL (`WebhookCallback`); the ingress checks its token, so it is published first.
        guard let callbackToken = try await store.account(id: account)?.webhookToken else { throw APIError.unauthorized("the account is gone") }
        try await RoutePublisher.publishToken(account: account, token: callbackToken, redis: api.redis, keys: api.options.keys)
        let callback = WebhookCallback.url(publicURL: api.options.publicURL, account: account, token: callbackToken)
        var made: [String] = []
        do {
            let listHook = try await api.trello.createWebhook(
                callbackURL: callback, modelID: listID, description: WebhookDescription.list(name), credentials: credentials)
            made.append(listHook)
            // One board webhook per account and board: lists on the same board share it.
            let siblings = try await store.syncLists(accountID: account).filter { $0.trelloBoardID == boardID && $0.id != list.id }
            let boardHook: String
            if let shared = siblings.compactMap(\.boardWebhookID).first {
                boardHook = shared
            } else {
                boardHook = try await api.trello.createWebhook(
                    callbackURL: callback, modelID: boardID, description: WebhookDescription.board, credentials: credentials)
                made.append(boardHook)
            }
            try await store.setWebhooks(syncListID: list.id, listWebhookID: listHook, boardWebhookID: boardHook)
            try await RoutePublisher.publishRoutes(
                account: account, models: [listID, boardID], store: store, redis: api.redis, keys: api.options.keys)
        } catch {
            await api.deleteWebhooks(Set(made), credentials: credentials, account: account, syncList: list.id)
            _ = try? await store.deleteSyncList(accountID: account, id: list.id)
            if let trelloError = error as? TrelloError {
                // The app's ids or the account's credentials are wrong: the request's fault (422). Trello unreachable,
                // failing, or unable to reach our ingress (its HEAD check): not the app's (502), try again later.
                switch trelloError.kind {
                case .tokenRejected, .credentialsRejected:
                    throw APIError.unprocessable("Trello refused the account's trello_api_key or trello_token: \(trelloError.message)")
                case .notFound,
                    .refused where trelloError.status == 400:
                    throw APIError.unprocessable("Trello refused the webhook for these ids: \(trelloError.message)")
                default:
                    throw APIError.badGateway("Trello refused the webhook: \(trelloError.message)")
                }
            }
            if error is APIError { throw error }
            throw APIError.unavailable("the list could not be set up (\(type(of: error))); nothing was kept, try again")
        }
        api.logger.info("list paired", metadata: ["account": "\(account)", "sync_list": "\(list.id)"])
        guard let stored = try await store.syncList(accountID: account, id: list.id) else { throw APIError.notFound("no list \(list.id)") }
        return EditedResponse(status: .created, response: SyncList(stored))
    }

    /// `PUT /dailyroundup/lists/{id}`: new settings, over the list's (a key left out keeps its value). The next event of
    /// the list obeys them; when they change which cards or fields sync, a reconciliation is queued, so cards that now
    /// match become creates and cards that no longer match become deletes without waiting for an edit of each.
    func update(_ account: String, _ id: String, _ request: Request, _ context: APIRequestContext) async throws -> SyncList {
        guard let list = try await api.store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        var settings = try SyncListSettingsBody.read(try await JSONBody.read(request, context: context), over: list.settings)
        if settings.filter.members.contains("me") {
            guard let credentials = try await api.store.accountDetails(id: account).flatMap(API.credentials) else {
                throw APIError.conflict("set trello_api_key and trello_token with PUT /dailyroundup/account first: \"me\" names the token's member")
            }
            settings = try await resolveMe(settings, credentials: credentials)
        }
        guard settings != list.settings else { return SyncList(list) }
        guard let updated = try await api.store.updateSyncListSettings(accountID: account, id: id, settings: settings) else {
            throw APIError.notFound("no list \(id)")
        }
        api.logger.info("list settings changed", metadata: ["account": "\(account)", "sync_list": "\(id)"])
        if Self.changesWhatSyncs(from: list.settings, to: settings) {
            do {
                _ = try await reconcile(account, id)
            } catch {
                // Another job of the account runs: the scheduled reconciliation brings the list in line instead.
                api.logger.info("reconciliation after a settings change not queued", metadata: ["sync_list": "\(id)", "error": "\(error)"])
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
            let me = try await api.trello.memberID(credentials: credentials)
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

    func delete(_ account: String, _ id: String) async throws -> HTTPResponse.Status {
        let store = api.store
        guard let list = try await store.syncList(accountID: account, id: id) else { throw APIError.notFound("no list \(id)") }
        let others = try await store.syncLists(accountID: account).filter { $0.id != id }
        var hooks = Set([list.listWebhookID].compactMap { $0 })
        if let board = list.boardWebhookID, !others.contains(where: { $0.boardWebhookID == board }) { hooks.insert(board) }
        // Trello refusing or unreachable never keeps the list: the webhooks that may remain are logged and counted.
        let credentials = try await store.accountDetails(id: account).flatMap(API.credentials)
        await api.deleteWebhooks(hooks, credentials: credentials, account: account, syncList: id)
        _ = try await store.deleteSyncList(accountID: account, id: id)
        // Published as the store has them now: the board stays routed while another list of the account is on it.
        let models = [list.trelloListID, list.trelloBoardID]
        do {
            try await RoutePublisher.publishRoutes(account: account, models: models, store: store, redis: api.redis, keys: api.options.keys)
        } catch {
            api.logger.warning("removing routes failed", metadata: ["account": "\(account)", "error": "\(error)"])
        }
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
        guard try await api.store.syncList(accountID: account, id: id) != nil else { throw APIError.notFound("no list \(id)") }
        return try await api.queue {
            try await api.jobs.submit(accountID: account, kind: kind, payload: .object(["sync_list_id": .string(id)]), total: total)
        }
    }
}
