import Foundation
import Mustache

/// The dashboard's HTML: server-rendered with swift-mustache, no script, no asset from elsewhere (one stylesheet served
/// by the dashboard itself). `{{…}}` escapes HTML; the only `{{{…}}}` is `content`, a page these templates rendered.
enum DashboardTemplates {
    /// The templates with every link, asset and form of the dashboard under `basePath` (validated by the
    /// configuration: slash-led segments of unreserved URL characters, so it is safe in an attribute as it is).
    static func library(basePath: String) -> MustacheLibrary {
        var library = MustacheLibrary()
        for (name, text) in [
            ("layout", layout), ("overview", overview), ("deadLetters", deadLetters), ("pending", pending), ("jobs", jobs), ("chart", chart),
            ("find", find), ("attempts", attempts),
        ] {
            let placed = text.replacingOccurrences(of: #"href="/"#, with: #"href="\#(basePath)/"#)
                .replacingOccurrences(of: #"action="/"#, with: #"action="\#(basePath)/"#)
            // The templates are constants of this file: a parse error is a programming error found by every test.
            try! library.register(placed, named: name)
        }
        return library
    }

    static let layout = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        {{#refresh}}<meta http-equiv="refresh" content="{{refresh}}">{{/refresh}}
        <title>{{title}} · roundup</title>
        <link rel="stylesheet" href="/static/dashboard.css">
        </head>
        <body>
        <header>
        <strong>roundup</strong>
        <nav>{{#nav}}<a href="{{path}}"{{#current}} aria-current="page"{{/current}}>{{label}}</a>{{/nav}}</nav>
        <span class="muted">{{generatedAt}}{{#refresh}} · refreshes every {{refresh}} s{{/refresh}}</span>
        {{#viewer}}<span class="role" data-role="viewer">viewer: read only</span>{{/viewer}}
        </header>
        <main>
        {{#flash}}<p class="flash" role="status">{{flash}}</p>{{/flash}}
        {{{content}}}
        </main>
        </body>
        </html>
        """

    static let chart = """
        <figure class="chart">
        <figcaption>{{title}} <span class="muted">(max {{maxLabel}}, last {{span}})</span></figcaption>
        <svg viewBox="0 0 {{width}} {{height}}" width="{{width}}" height="{{height}}" role="img" aria-label="{{title}}">
        <line x1="0" y1="{{height}}" x2="{{width}}" y2="{{height}}" class="axis"/>
        {{#series}}<polyline class="{{css}}" points="{{points}}"/>{{/series}}
        </svg>
        <p class="legend">{{#series}}<span class="{{css}}">■</span> {{name}} {{last}} {{/series}}</p>
        </figure>
        """

    static let overview = """
        <h1>Streams</h1>
        <table class="streams">
        <thead><tr><th>stream</th><th>length</th><th>waiting</th><th>pending</th><th>oldest waiting</th><th>oldest pending</th>
        <th>dead letters</th><th>consumers</th><th>state</th><th></th></tr></thead>
        <tbody>
        {{#streams}}
        <tr data-stream="{{name}}"{{#paused}} class="paused"{{/paused}}>
        <th scope="row">{{name}}</th>
        <td data-field="length">{{length}}</td><td data-field="lag">{{lag}}</td><td data-field="pending">{{pending}}</td>
        <td data-field="oldest_waiting">{{oldestWaiting}}</td><td data-field="oldest_pending">{{oldestPending}}</td>
        <td data-field="dead_letters">{{deadLetters}}</td><td data-field="consumers">{{consumers}}</td>
        <td data-field="state">{{#paused}}paused since {{pausedSince}}{{/paused}}{{^paused}}running{{/paused}}</td>
        <td>{{#canChange}}<form method="post" action="/streams/{{name}}/{{action}}"><input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="back" value="/"><button type="submit" class="{{action}}">{{actionLabel}}</button></form>{{/canChange}}</td>
        </tr>
        {{/streams}}
        </tbody>
        </table>
        <section class="charts">{{#charts}}{{> chart}}{{/charts}}</section>

        <h2>Failing now <a class="more" href="/pending?min_deliveries=2">all</a></h2>
        {{#empty(failing)}}<p class="muted">No entry has failed a delivery.</p>{{/empty(failing)}}
        {{^empty(failing)}}<table class="failing"><thead><tr><th>stream</th><th>entry</th><th>type</th><th>account</th><th>deliveries</th>
        <th>idle</th><th>last error</th></tr></thead><tbody>{{/empty(failing)}}
        {{#failing}}<tr data-entry="{{id}}"><td>{{stream}}</td><td>{{id}}</td><td>{{type}}</td><td>{{account}}</td>
        <td data-field="deliveries">{{deliveries}}</td><td>{{idle}}</td><td class="error">{{error}}</td></tr>{{/failing}}
        {{^empty(failing)}}</tbody></table>{{/empty(failing)}}

        <h2>Sync jobs <a class="more" href="/jobs">all</a></h2>
        <p data-field="jobs"><span data-field="jobs_running">{{jobs.running}}</span> running,
        <span data-field="jobs_stale">{{jobs.stale}}</span> stale,
        <span data-field="jobs_queued">{{jobs.queued}}</span> queued,
        <span data-field="jobs_errors">{{jobs.errors}}</span> ended with an error (of the last {{jobs.window}})</p>
        {{^empty(jobs.recentErrors)}}<table><thead><tr><th>job</th><th>kind</th><th>account</th><th>when</th><th>error</th></tr></thead><tbody>{{/empty(jobs.recentErrors)}}
        {{#jobs.recentErrors}}<tr><td>{{id}}</td><td>{{kind}}</td><td>{{account}}</td><td>{{updatedAt}}</td><td class="error">{{error}}</td></tr>{{/jobs.recentErrors}}
        {{^empty(jobs.recentErrors)}}</tbody></table>{{/empty(jobs.recentErrors)}}

        <h2>Paused accounts</h2>
        {{#empty(pausedAccounts)}}<p class="muted">None.</p>{{/empty(pausedAccounts)}}
        {{^empty(pausedAccounts)}}<table class="paused-accounts"><thead><tr><th>account</th><th>paused since</th><th></th></tr></thead><tbody>{{/empty(pausedAccounts)}}
        {{#pausedAccounts}}<tr data-paused-account="{{reference}}"><td>{{account}}</td><td>{{since}}</td>
        <td>{{#canChange}}<form method="post" action="/accounts/resume"><input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="account_ref" value="{{reference}}"><input type="hidden" name="back" value="/">
        <button type="submit" class="resume">Resume</button></form>{{/canChange}}</td></tr>{{/pausedAccounts}}
        {{^empty(pausedAccounts)}}</tbody></table>{{/empty(pausedAccounts)}}
        {{#canChange}}<form method="post" action="/accounts/pause" class="filter"><input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="back" value="/"><label>account id <input name="account" size="40"></label>
        <button type="submit" class="pause pause-account">Pause the account</button></form>{{/canChange}}

        <h2>Accounts that need attention</h2>
        {{#empty(accounts)}}<p class="muted">None.</p>{{/empty(accounts)}}
        {{^empty(accounts)}}<table class="accounts"><thead><tr><th>account</th><th>why</th><th>lists</th></tr></thead><tbody>{{/empty(accounts)}}
        {{#accounts}}<tr><td>{{account}}</td><td>{{reason}}</td><td>{{lists}}</td></tr>{{/accounts}}
        {{^empty(accounts)}}</tbody></table>{{/empty(accounts)}}
        """

    static let deadLetters = """
        <h1>Dead letters <span class="muted">({{total}} in all)</span></h1>
        <form method="get" action="/dead-letters" class="filter">
        <label>account <input name="account" value="{{filter.account}}"></label>
        <label>type <input name="type" value="{{filter.type}}"></label>
        <label>error contains <input name="error" value="{{filter.error}}"></label>
        <label>failed since <input name="since" value="{{filter.since}}" size="8" placeholder="2h"></label>
        <label>until <input name="until" value="{{filter.until}}" size="8" placeholder="30m"></label>
        <button type="submit">Filter</button> <a href="/dead-letters">clear</a>
        </form>
        {{#filtered}}<p class="matching"><span data-field="matching">{{matching}}</span> match in all.
        {{#canChange}}{{#anyMatching}}<form method="post" action="/dead-letters/replay-matching"><input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="back" value="{{back}}"><input type="hidden" name="account" value="{{filter.account}}">
        <input type="hidden" name="type" value="{{filter.type}}"><input type="hidden" name="error" value="{{filter.error}}">
        <input type="hidden" name="since" value="{{filter.since}}"><input type="hidden" name="until" value="{{filter.until}}">
        <button type="submit" class="replay replay-matching">Replay the {{matching}} matching</button></form>{{/anyMatching}}{{/canChange}}</p>{{/filtered}}
        {{#empty(letters)}}<p class="muted">No dead letter{{#filtered}} matches{{/filtered}}.</p>{{/empty(letters)}}
        {{^empty(letters)}}<table class="dead-letters"><thead><tr><th>id</th><th>type</th><th>account</th><th>action</th><th>deliveries</th>
        <th>failed</th><th>error</th><th></th></tr></thead><tbody>{{/empty(letters)}}
        {{#letters}}
        <tr data-letter="{{id}}"><td>{{id}}</td><td>{{type}}</td><td>{{account}}</td><td>{{action}}</td><td>{{deliveries}}</td>
        <td>{{failedAt}}</td><td class="error">{{error}}
        {{> attempts}}</td>
        <td class="actions">{{#canChange}}<form method="post" action="/dead-letters/{{id}}/replay"><input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="back" value="{{back}}"><button type="submit" class="replay">Replay</button></form>
        <form method="post" action="/dead-letters/{{id}}/delete"><input type="hidden" name="csrf" value="{{csrf}}">
        <input type="hidden" name="back" value="{{back}}"><button type="submit" class="delete">Delete</button></form>{{/canChange}}</td>
        </tr>
        {{/letters}}
        {{^empty(letters)}}</tbody></table>{{/empty(letters)}}
        {{#next}}<p><a class="next" href="{{next}}">next page</a></p>{{/next}}
        """

    static let pending = """
        <h1>Pending entries</h1>
        <form method="get" action="/pending" class="filter">
        <label>stream <select name="stream">{{#streams}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/streams}}</select></label>
        <label>delivered at least <input name="min_deliveries" value="{{minDeliveries}}" size="3"> times</label>
        <button type="submit">Show</button>
        </form>
        {{#empty(entries)}}<p class="muted">Nothing pending.</p>{{/empty(entries)}}
        {{^empty(entries)}}<table class="pending"><thead><tr><th>entry</th><th>type</th><th>account</th><th>consumer</th><th>idle</th>
        <th>deliveries</th><th>last error</th></tr></thead><tbody>{{/empty(entries)}}
        {{#entries}}<tr data-entry="{{id}}"><td>{{id}}</td><td>{{type}}</td><td>{{account}}</td><td>{{consumer}}</td><td>{{idle}}</td>
        <td data-field="deliveries">{{deliveries}}</td><td class="error">{{error}}</td></tr>{{/entries}}
        {{^empty(entries)}}</tbody></table>{{/empty(entries)}}
        {{#next}}<p><a class="next" href="{{next}}">next page</a></p>{{/next}}
        """

    /// A row's failed deliveries, folded (dead letters, find).
    static let attempts = """
        {{^empty(attempts)}}<details class="attempts"><summary>{{count(attempts)}} attempt(s)</summary><ol>{{/empty(attempts)}}
        {{#attempts}}<li data-attempt><span>{{at}}</span> · <span data-field="consumer">{{consumer}}</span> · <span>{{error}}</span></li>{{/attempts}}
        {{^empty(attempts)}}</ol></details>{{/empty(attempts)}}
        """

    static let find = """
        <h1>Find an event</h1>
        <form method="get" action="/find" class="filter">
        <label>Trello action <input name="action" value="{{action}}"></label>
        <label>card <input name="card" value="{{card}}"></label>
        <label>account <input name="account" value="{{account}}"></label>
        <button type="submit">Find</button>
        </form>
        {{#searched}}{{#empty(found)}}<p class="muted" data-field="nothing">Nothing in the streams, the dead letters or the history of {{searchedAccounts}} account(s).</p>{{/empty(found)}}{{/searched}}
        {{^empty(found)}}<table class="found"><thead><tr><th>where</th><th>entry</th><th>type</th><th>account</th><th>action</th><th>card</th>
        <th>now</th></tr></thead><tbody>{{/empty(found)}}
        {{#found}}<tr data-place="{{place}}"><td>{{place}}</td><td>{{id}}</td><td>{{type}}</td><td>{{account}}</td><td>{{action}}</td><td>{{card}}</td>
        <td class="detail">{{detail}}
        {{> attempts}}</td></tr>{{/found}}
        {{^empty(found)}}</tbody></table>{{/empty(found)}}
        """

    static let jobs = """
        <h1>Sync jobs <span class="muted">(the last {{count}})</span></h1>
        {{#empty(jobs)}}<p class="muted">No jobs.</p>{{/empty(jobs)}}
        {{^empty(jobs)}}<table class="jobs"><thead><tr><th>job</th><th>kind</th><th>status</th><th>progress</th><th>heartbeat</th>
        <th>account</th><th>created</th><th>error</th></tr></thead><tbody>{{/empty(jobs)}}
        {{#jobs}}<tr data-job="{{id}}"{{#stale}} class="stale"{{/stale}}><td>{{id}}</td><td>{{kind}}</td><td>{{status}}{{#stale}} (stale){{/stale}}</td>
        <td>{{processed}}/{{total}}</td><td>{{heartbeat}}</td><td>{{account}}</td><td>{{createdAt}}</td><td class="error">{{error}}</td></tr>{{/jobs}}
        {{^empty(jobs)}}</tbody></table>{{/empty(jobs)}}
        """

    static let stylesheet = """
        :root { color-scheme: light dark; --bad: #c0392b; --warn: #b7791f; --ok: #2f855a; --line: #8884; }
        body { font: 14px/1.4 system-ui, sans-serif; margin: 0; }
        header { display: flex; gap: 1.5em; align-items: baseline; padding: .6em 1em; border-bottom: 1px solid var(--line); }
        nav a { margin-right: 1em; } nav a[aria-current] { font-weight: bold; text-decoration: none; }
        main { padding: 0 1em 2em; }
        table { border-collapse: collapse; margin: .5em 0 1em; }
        th, td { text-align: left; padding: .25em .7em; border-bottom: 1px solid var(--line); vertical-align: top; }
        td[data-field], td:nth-child(n+2) { font-variant-numeric: tabular-nums; }
        tr.paused th, tr.paused td[data-field=state] { color: var(--warn); font-weight: bold; }
        tr.stale td { color: var(--warn); }
        .error { color: var(--bad); max-width: 40em; overflow-wrap: anywhere; }
        .muted { color: #888; } .more { font-size: 70%; font-weight: normal; }
        .flash { background: #2f855a22; border-left: 4px solid var(--ok); padding: .4em .8em; }
        form { display: inline; } .filter { display: block; margin: .5em 0; } .filter label { margin-right: 1em; }
        button.pause, button.delete { color: var(--bad); } button.resume, button.replay { color: var(--ok); }
        .charts { display: flex; flex-wrap: wrap; gap: 2em; }
        .chart svg { border: 1px solid var(--line); } .chart polyline { fill: none; stroke-width: 1.5; }
        .axis { stroke: var(--line); }
        .s-webhooks { stroke: #3182ce; color: #3182ce; } .s-jobs { stroke: #805ad5; color: #805ad5; } .s-push { stroke: #dd6b20; color: #dd6b20; }
        .legend { margin: .2em 0; } .role { color: var(--warn); font-weight: bold; }
        """
}
