/** Effect and record in one knex transaction, on PostgreSQL and on MySQL (test/suites/orm-transactions.suite.ts). */
import { databaseAvailable, describeOrmTransactions } from '../suites/orm-transactions.suite.js';

describeOrmTransactions('knex', 'postgres', await databaseAvailable('postgres'));
describeOrmTransactions('knex', 'mysql', await databaseAvailable('mysql'));
