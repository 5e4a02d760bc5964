import type { Migration } from '../migrate.js';
import { m001 } from './001_core.js';
import { m002 } from './002_queue.js';
import { m003 } from './003_coord_state.js';
import { m004 } from './004_queue_group_pause.js';
import { m005 } from './005_queue_payload_text.js';
import { m006 } from './006_queue_autovacuum.js';
import { m007 } from './007_queue_claim_without_payload.js';
import { m010 } from './010_backend_api.js';
import { m011 } from './011_contact_search.js';
import { m020 } from './020_mta_records.js';
import { m021 } from './021_mta_delivery_log.js';
import { m022 } from './022_mta_dlq.js';
import { m023 } from './023_dkim_multi_key.js';
import { m030 } from './030_delivery_provenance.js';
import { m040 } from './040_webhooks.js';
import { m050 } from './050_feedback.js';
import { m060 } from './060_public_content.js';
import { m061 } from './061_campaigns_forms.js';
import { m062 } from './062_mta_outbox.js';
import { m063 } from './063_feedback_reports.js';
import { m064 } from './064_provider_routes.js';
import { m065 } from './065_transport_security.js';
import { m066 } from './066_submission_receipts.js';
import { m067 } from './067_app_passwords.js';
import { m068 } from './068_inbound_routes.js';
import { m069 } from './069_inbox_mailboxes.js';
import { m070 } from './070_submission_bodies.js';
import { m072 } from './072_admin_users.js';
import { m073 } from './073_dashboard_records.js';
import { m074 } from './074_campaign_schedule.js';
import { m075 } from './075_queue_payload_bytea.js';
import { m076 } from './076_send_provenance_ids.js';
import { m077 } from './077_provenance_breaker_epoch.js';
import { m078 } from './078_send_status_check.js';
import { m079 } from './079_send_status_validate.js';

/**
 * Every migration, in order. Each module adds its own file and one line here. 001–061 were
 * numbered by area (docs/architecture.md, "The store"); a new one takes the next number above
 * the highest, whatever its area. Functions go in ../functions/, never here.
 */
export const MIGRATIONS: Migration[] = [m001, m002, m003, m004, m005, m006, m007, m010, m011, m020, m021, m022, m023, m030, m040, m050, m060, m061, m062, m063, m064, m065, m066, m067, m068, m069, m070, m072, m073, m074, m075, m076, m077, m078, m079];
