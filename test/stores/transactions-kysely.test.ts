/** Effect and record in one kysely transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, describeOrmTransactions } from '../suites/orm-transactions.suite.js';

describeOrmTransactions('kysely', 'postgres', await databaseAvailable('postgres'));
describeOrmTransactions('kysely', 'mysql', await databaseAvailable('mysql'));
